/**
 * The Mercure subscriptions API (draft-08 §Subscription API, on with MERCURE_SUBSCRIPTIONS): GET
 * <hub>/subscriptions, …/{match_type}/{match} and …/{match_type}/{match}/{subscriber} list the
 * active Mercure subscriptions the registry (active-subscriptions.ts) holds. Each needs a `subscribe` grant
 * on the URL's path (the same form as the event topics, so one grant covers both). No SQL here.
 *
 * With MERCURE_PROTOCOL_COMPATIBILITY=8, the 0.x routes too, for the `topic=` subscriptions, in the
 * 0.x shape (legacy-subscriptions.ts): …/{topic} and …/{topic}/{subscriber}. A two-segment path is
 * 1.0's when its first segment is a matcher type (`exact`, `urlpattern`), else 0.x's, as the
 * reference hub tells them apart. The collection <hub>/subscriptions keeps the 1.0 document in both
 * modes and lists every open Mercure subscription: in compatibility mode the `topic=` ones too, each
 * in its 0.x shape without the `@context` (as the reference hub lists them), so a client that reads
 * the whole collection misses none of the subscriptions the events announce.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ApiError } from '../errors.ts';
import { errorSchema } from '../http/errors.ts';
import { type ActiveSubscriptions, expandVar, mercureSubscriptionTopic } from './active-subscriptions.ts';
import type { MercureAuthorizer } from './authorize.ts';
import { sendMercureError } from './challenge.ts';
import { hubLink } from './discovery.ts';
import {
  isLegacyDoc,
  legacyEntry,
  legacyEscape,
  legacyUnescape,
  sendLegacy,
} from './legacy-subscriptions.ts';

/** Most Mercure subscriptions one API answer lists (the draft lets collections be truncated). */
export const MAX_LISTED = 10_000;

const docSchema = {
  type: 'object',
  required: ['id', 'type', 'match_type', 'match', 'subscriber', 'active'],
  properties: {
    id: { type: 'string' },
    type: { type: 'string', enum: ['subscription'] },
    match_type: { type: 'string' },
    match: { type: 'string' },
    subscriber: { type: 'string' },
    active: { type: 'boolean' },
    payload: { type: 'object', additionalProperties: true },
  },
} as const;
/** A `topic=` subscription in the 1.0 collection (compatibility mode): its 0.x document, no `@context`. */
const legacyEntrySchema = {
  type: 'object',
  required: ['id', 'type', 'subscriber', 'topic', 'active'],
  properties: {
    id: { type: 'string' },
    type: { type: 'string', enum: ['Subscription'] },
    subscriber: { type: 'string' },
    topic: { type: 'string' },
    active: { type: 'boolean' },
    payload: { type: 'object', additionalProperties: true },
  },
} as const;
const collectionSchema = (entry: object) =>
  ({
    type: 'object',
    required: ['id', 'type', 'subscriptions'],
    properties: {
      id: { type: 'string' },
      type: { type: 'string', enum: ['subscriptions'] },
      subscriptions: { type: 'array', items: entry },
    },
  }) as const;
const problem = { type: 'object', additionalProperties: true } as const;
/** A 0.x answer (application/ld+json), written by sendLegacy rather than through a schema. */
const jsonLd = { type: 'object', additionalProperties: true, description: 'a 0.x JSON-LD document' } as const;

export interface ActiveSubscriptionRoutesDeps {
  activeSubscriptions: ActiveSubscriptions;
  authorizer: MercureAuthorizer;
  /** The id of the last update every subscriber can already be sent (else `earliest`): read before
   * the rows, so a client that subscribes from it misses no event of what it listed. */
  lastEventId: () => Promise<string>;
  /** MERCURE_PROTOCOL_COMPATIBILITY=8: the 0.x routes too. */
  legacy?: boolean;
}

type MatcherReq = { Params: { match_type: string; match: string } };
type OneReq = { Params: { match_type: string; match: string; subscriber: string } };
/** `legacy`: only the 0.x subscriptions, answered in the 0.x shape (true), only the 1.0 ones (false),
 * or both in the 1.0 collection (undefined). */
type Filter = { matchType?: string; match?: string; subscriber?: string; legacy?: boolean };

/** The matcher types a 1.0 path names (any other first segment is a 0.x topic). */
const MATCH_TYPES = new Set(['exact', 'urlpattern']);

export function activeSubscriptionRoutes(app: FastifyInstance, deps: ActiveSubscriptionRoutesDeps): void {
  const hubPath = new URL(deps.authorizer.hub).pathname;
  const base = `${hubPath}/subscriptions`;
  const common = {
    config: { access: 'public' as const },
  };
  const collection = collectionSchema(deps.legacy ? { anyOf: [docSchema, legacyEntrySchema] } : docSchema);
  app.get(
    base,
    {
      ...common,
      schema: {
        summary: 'Mercure: the active subscriptions',
        tags: ['mercure'],
        response: { 200: collection, 400: problem, 401: problem, 403: problem },
      },
    },
    (request, reply) =>
      answer(deps, request, reply, base, { legacy: deps.legacy ? undefined : false }, false),
  );
  app.get<MatcherReq>(
    `${base}/:match_type/:match`,
    {
      ...common,
      schema: {
        summary: 'Mercure: the active subscriptions of one matcher',
        tags: ['mercure'],
        params: {
          type: 'object',
          required: ['match_type', 'match'],
          properties: { match_type: { type: 'string' }, match: { type: 'string' } },
        },
        response: { 200: collectionSchema(docSchema), 400: problem, 401: problem, 403: problem },
      },
    },
    (request, reply) =>
      deps.legacy && !MATCH_TYPES.has(request.params.match_type)
        ? legacyRoute(deps, hubPath, request, reply)
        : listOfMatcher(deps, base, request, reply),
  );
  if (deps.legacy) {
    app.get(
      `${base}/:topic`,
      {
        ...common,
        schema: {
          summary: 'Mercure 0.x: the active subscriptions of one topic selector',
          tags: ['mercure'],
          params: { type: 'object', required: ['topic'], properties: { topic: { type: 'string' } } },
          response: { 200: jsonLd, 400: problem, 401: problem, 403: problem },
        },
      },
      (request, reply) => legacyRoute(deps, hubPath, request, reply),
    );
  }
  app.get<OneReq>(
    `${base}/:match_type/:match/:subscriber`,
    {
      ...common,
      schema: {
        summary: 'Mercure: one active subscription',
        tags: ['mercure'],
        params: {
          type: 'object',
          required: ['match_type', 'match', 'subscriber'],
          properties: {
            match_type: { type: 'string' },
            match: { type: 'string' },
            subscriber: { type: 'string' },
          },
        },
        response: { 200: docSchema, 400: problem, 401: problem, 403: problem, 404: errorSchema },
      },
    },
    (request, reply) => showOne(deps, hubPath, request, reply),
  );
}

function listOfMatcher(
  deps: ActiveSubscriptionRoutesDeps,
  base: string,
  request: FastifyRequest<MatcherReq>,
  reply: FastifyReply,
): Promise<FastifyReply> {
  const { match_type: matchType, match } = request.params;
  const id = `${base}/${expandVar(matchType)}/${expandVar(match)}`;
  return answer(deps, request, reply, id, { matchType, match, legacy: false }, false);
}

/**
 * …/{topic} and …/{topic}/{subscriber} (0.x): the segments are read from the raw path, since a 0.x
 * value's space is `+` there (the router's decoding would keep it a `+`).
 */
function legacyRoute(
  deps: ActiveSubscriptionRoutesDeps,
  hubPath: string,
  request: FastifyRequest,
  reply: FastifyReply,
): Promise<FastifyReply> {
  const path = (request.raw.url ?? '').split(/[?#]/)[0];
  const segments = path.slice(`${hubPath}/subscriptions/`.length).split('/').map(legacyUnescape);
  const [topic, subscriber] = segments;
  if (topic === undefined || segments.includes(undefined)) {
    throw new ApiError(
      400,
      'invalid_request',
      'a 0.x subscriptions path segment is not percent-encoded UTF-8',
    );
  }
  const collection = `${hubPath}/subscriptions/${legacyEscape(topic)}`;
  if (subscriber === undefined) {
    return answer(
      deps,
      request,
      reply,
      collection,
      { matchType: 'topic', match: topic, legacy: true },
      false,
    );
  }
  const id = `${collection}/${legacyEscape(subscriber)}`;
  return answer(
    deps,
    request,
    reply,
    id,
    { matchType: 'topic', match: topic, subscriber, legacy: true },
    true,
  );
}

function showOne(
  deps: ActiveSubscriptionRoutesDeps,
  hubPath: string,
  request: FastifyRequest<OneReq>,
  reply: FastifyReply,
): Promise<FastifyReply> {
  const { match_type: matchType, match, subscriber } = request.params;
  const id = mercureSubscriptionTopic(hubPath, matchType, match, subscriber);
  return answer(deps, request, reply, id, { matchType, match, subscriber, legacy: false }, true);
}

/** The answer of every route: the collection (or `single` document) `id` names, once authorized. */
async function answer(
  deps: ActiveSubscriptionRoutesDeps,
  request: FastifyRequest,
  reply: FastifyReply,
  id: string,
  filter: Filter,
  single: boolean,
): Promise<FastifyReply> {
  const { activeSubscriptions, authorizer } = deps;
  const auth = await authorizer.authenticate(request, 'subscribe');
  if (!auth.ok) return sendMercureError(reply, auth);
  if (auth.grants === null) {
    return sendMercureError(
      reply,
      authorizer.challenges.missing('the subscriptions API needs an access token'),
    );
  }
  if (!authorizer.canRead(auth.grants, [id])) {
    return sendMercureError(
      reply,
      authorizer.challenges.forbidden(`the token does not grant subscribe on ${id}`),
    );
  }
  const last = await deps.lastEventId();
  const docs = await activeSubscriptions.list(filter, single ? 1 : MAX_LISTED);
  reply.header('cache-control', 'must-revalidate');
  if (filter.legacy) {
    reply.header('link', hubLink(authorizer.hub, { lastEventId: last }));
    return sendLegacy(reply, { id, lastEventId: last, docs, single });
  }
  reply
    .header(
      'link',
      hubLink(authorizer.hub, { lastEventId: last, type: 'mercure', contentType: 'application/json' }),
    )
    .type('application/json');
  if (single) {
    if (docs.length === 0) throw new ApiError(404, 'not_found', 'no such active subscription');
    return reply.send(docs[0]);
  }
  const subscriptions = docs.map((d) => (isLegacyDoc(d) ? legacyEntry(d) : d));
  return reply.send({ id, type: 'subscriptions', subscriptions });
}
