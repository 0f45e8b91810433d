/**
 * The Mercure subscriptions API (draft-08 §Subscription API, on with MERCURE_SUBSCRIPTIONS): GET
 * <hub>/subscriptions, …/{match_type}/{match} and …/{match_type}/{match}/{subscriber} list the
 * active Mercure subscriptions the registry (active-subscriptions.ts) holds. Each needs a `subscribe` grant
 * on the URL's path (the same form as the event topics, so one grant covers both). No SQL here.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ApiError } from '../errors.ts';
import { errorSchema } from '../http/errors.ts';
import { type ActiveSubscriptions, expandVar, mercureSubscriptionTopic } from './active-subscriptions.ts';
import type { MercureAuthorizer } from './authorize.ts';
import { sendMercureError } from './challenge.ts';
import { hubLink } from './discovery.ts';

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
const collectionSchema = {
  type: 'object',
  required: ['id', 'type', 'subscriptions'],
  properties: {
    id: { type: 'string' },
    type: { type: 'string', enum: ['subscriptions'] },
    subscriptions: { type: 'array', items: docSchema },
  },
} as const;
const problem = { type: 'object', additionalProperties: true } as const;

export interface ActiveSubscriptionRoutesDeps {
  activeSubscriptions: ActiveSubscriptions;
  authorizer: MercureAuthorizer;
  /** The id of the last update every subscriber can already be sent (else `earliest`): read before
   * the rows, so a client that subscribes from it misses no event of what it listed. */
  lastEventId: () => Promise<string>;
}

type MatcherReq = { Params: { match_type: string; match: string } };
type OneReq = { Params: { match_type: string; match: string; subscriber: string } };
type Filter = { matchType?: string; match?: string; subscriber?: string };

export function activeSubscriptionRoutes(app: FastifyInstance, deps: ActiveSubscriptionRoutesDeps): void {
  const hubPath = new URL(deps.authorizer.hub).pathname;
  const base = `${hubPath}/subscriptions`;
  const common = {
    config: { access: 'public' as const },
  };
  app.get(
    base,
    {
      ...common,
      schema: {
        summary: 'Mercure: the active subscriptions',
        tags: ['mercure'],
        response: { 200: collectionSchema, 400: problem, 401: problem, 403: problem },
      },
    },
    (request, reply) => answer(deps, request, reply, base, {}, false),
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
        response: { 200: collectionSchema, 400: problem, 401: problem, 403: problem },
      },
    },
    (request, reply) => listOfMatcher(deps, base, request, reply),
  );
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
  return answer(deps, request, reply, id, { matchType, match }, false);
}

function showOne(
  deps: ActiveSubscriptionRoutesDeps,
  hubPath: string,
  request: FastifyRequest<OneReq>,
  reply: FastifyReply,
): Promise<FastifyReply> {
  const { match_type: matchType, match, subscriber } = request.params;
  const id = mercureSubscriptionTopic(hubPath, matchType, match, subscriber);
  return answer(deps, request, reply, id, { matchType, match, subscriber }, true);
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
  reply
    .header(
      'link',
      hubLink(authorizer.hub, { lastEventId: last, type: 'mercure', contentType: 'application/json' }),
    )
    .header('cache-control', 'must-revalidate')
    .type('application/json');
  if (single) {
    if (docs.length === 0) throw new ApiError(404, 'not_found', 'no such active subscription');
    return reply.send(docs[0]);
  }
  return reply.send({ id, type: 'subscriptions', subscriptions: docs });
}
