/**
 * GET /.well-known/mercure (draft-08 §Subscription): an SSE stream of the updates the query's
 * matchers select and the token may read. QUERY /.well-known/mercure is the same subscription with
 * its parameters in a form body too (the draft's safe method with a body, for matcher lists too long
 * for a URL): the pairs of the query and of the body are taken together, query first, so a
 * `last_event_id` in the query wins over one in the body. It resumes where the request says
 * (resume.ts), runs on the feed's tailer and hub as a MercureSelection (subscribe.ts), and ends when
 * the token expires. Like every feed-backed stream (src/http/feed-sse.ts), it answers 200 while the
 * database cannot say where it resumes: primed with the id as given, it resumes once it can (without
 * the Mercure-Last-Event-ID header then: the headers went before the answer). With active subscriptions on, the registry hears of every subscriber's start and
 * end. No SQL here.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../config/config.ts';
import type { Db } from '../db/database.ts';
import { ApiError } from '../errors.ts';
import type { Feed } from '../feed/feed.ts';
import { errorSchema } from '../http/errors.ts';
import { openFeedSse } from '../http/feed-sse.ts';
import { type ActiveSubscriptions, newSubscriberId } from './active-subscriptions.ts';
import type { MercureAuthorizer } from './authorize.ts';
import { sendMercureError } from './challenge.ts';
import { type FormPair, parseForm, rawQuery } from './form.ts';
import { MERCURE_STREAM } from './frames.ts';
import type { MercureStats } from './metrics.ts';
import { HUB_PATH } from './publish.ts';
import type { MercureIds } from './ids.ts';
import { givenId, resolveResume } from './resume.ts';
import { MercureSelection, compileRequestSelectors, subscribeRequest } from './subscribe.ts';

export interface SubscribeRouteDeps {
  config: Config;
  db: Db;
  feed: Feed;
  authorizer: MercureAuthorizer;
  stats: MercureStats;
  /** Active subscriptions (active-subscriptions.ts), told of every subscriber's start and end. */
  activeSubscriptions?: Pick<ActiveSubscriptions, 'opened' | 'closed'>;
  /** The database's generated ids (ids.ts). */
  ids: MercureIds;
}

const subscribeSchema = {
  summary: 'Mercure: subscribe (SSE)',
  description:
    'Query: `match` / `match_exact` (exact topic), `match_urlpattern` (URL Pattern), `*` for every topic, `last_event_id` (the Last-Event-ID header wins). Any other parameter starting with `match` is a 400, and so is `topic` unless MERCURE_PROTOCOL_COMPATIBILITY=8. See docs/mercure.md.',
  tags: ['mercure'],
  querystring: {
    type: 'object',
    additionalProperties: true,
    properties: {
      match: { description: 'an exact topic (repeatable)' },
      match_exact: { description: 'an exact topic (repeatable)' },
      match_urlpattern: { description: 'a URL Pattern (repeatable)' },
      last_event_id: { description: 'resume after this update id, or `earliest`' },
    },
  },
  response: {
    200: {
      description: 'text/event-stream of updates',
      content: { 'text/event-stream': { schema: { type: 'string' } } },
    },
    400: errorSchema,
    401: errorSchema,
    403: errorSchema,
    503: errorSchema,
  },
};

const querySubscribeSchema = {
  ...subscribeSchema,
  summary: 'Mercure: subscribe (SSE), parameters in the body',
  description:
    'The GET subscription with its parameters in an application/x-www-form-urlencoded body as well as in the query: every pair of both is taken (a `last_event_id` in the query wins over the body). See docs/mercure.md.',
  consumes: ['application/x-www-form-urlencoded'],
  response: { ...subscribeSchema.response, 415: errorSchema },
};

/** Registers GET and QUERY on the hub; `app` parses form bodies as raw bytes (routes.ts). */
export function subscribeRoute(app: FastifyInstance, deps: SubscribeRouteDeps): void {
  app.get(HUB_PATH, { config: { access: 'public' }, schema: subscribeSchema }, async (request, reply) =>
    subscribe(deps, request, reply, queryPairs(request)),
  );
  app.query(
    HUB_PATH,
    { config: { access: 'public' }, schema: querySubscribeSchema },
    async (request, reply) =>
      subscribe(deps, request, reply, [...queryPairs(request), ...bodyPairs(request)]),
  );
}

const queryPairs = (request: FastifyRequest): FormPair[] =>
  parseForm(rawQuery(request.raw.url ?? ''), 'query');

function bodyPairs(request: FastifyRequest): FormPair[] {
  if (!Buffer.isBuffer(request.body)) {
    throw new ApiError(
      415,
      'unsupported_media_type',
      'a Mercure QUERY subscription has an application/x-www-form-urlencoded body',
    );
  }
  return parseForm(request.body, 'body');
}

async function subscribe(
  deps: SubscribeRouteDeps,
  request: FastifyRequest,
  reply: FastifyReply,
  pairs: readonly FormPair[],
): Promise<FastifyReply> {
  const { config, db, feed, authorizer, stats } = deps;
  const hub = authorizer.hub;
  const req = subscribeRequest(pairs, config.mercureProtocolCompatibility === 8);
  const matcher = compileRequestSelectors(req.selectors, hub);
  const auth = await authorizer.authenticate(request, 'subscribe');
  if (!auth.ok) return sendMercureError(reply, auth);
  const grants = auth.grants;
  const given = givenId(request.headers['last-event-id'], req.lastEventId);
  // The stream ends when the token expires (draft §Authorization); the client reconnects with a fresh one.
  return openFeedSse(request, reply, {
    feed,
    config,
    // The priming frame is an id alone: browsers take it as lastEventId without firing an event.
    // Until the id is looked up, the stream is primed with it as given.
    provisional: given === undefined ? '' : `id: ${given}\n\n`,
    expires:
      grants !== null && Number.isFinite(grants.exp)
        ? { atMs: grants.exp * 1000, frame: ': token expired\n\n' }
        : undefined,
    decide: async () => {
      const resume = await resolveResume(db, feed, given, config.startWaitMs, deps.ids);
      const headers = resume.header === undefined ? undefined : { 'mercure-last-event-id': resume.header };
      return { after: resume.cursor, opening: `id: ${resume.primedId}\n\n`, headers, found: resume.found };
    },
    subscribe: (start, sink) => {
      const selection = new MercureSelection({
        reads: feed.reads,
        tailer: feed.tailer,
        selectors: req.selectors,
        matcher,
        canRead: (topics) => authorizer.canRead(grants, topics),
        endOnReset: start.found,
        retryMs: config.sseRetryMs,
        stats,
        ids: deps.ids,
      });
      const subscriber = feed.hub.subscribe([MERCURE_STREAM], start.after, sink, selection);
      const active = deps.activeSubscriptions;
      const conn = active && { subscriber: newSubscriberId(), selectors: req.selectors, grants };
      if (active && conn) void active.opened(conn);
      stats.subscribers++;
      return () => {
        stats.subscribers--;
        feed.hub.unsubscribe(subscriber);
        if (active && conn) void active.closed(conn);
      };
    },
  });
}
