/**
 * The Mercure hub's routes at /.well-known/mercure (draft-08): POST publishes an update (a form
 * body), GET subscribes over SSE. No SQL here: publishes go through the hub's own group-commit
 * batcher (commitfeed.mercure_append), subscriptions through the feed's tailer and hub as a
 * Selection (subscribe.ts), so Mercure updates share the native API's order, catch-up, hand-over,
 * backpressure and retention.
 *
 * The native token hook treats these routes as public: the hub authenticates on its own (Mercure
 * tokens, MERCURE_ISSUERS; see the authorizer) and never reads `access_token` or the native cookie.
 *
 * Lifecycle: registered once per app; the batcher is closed when the app closes (after the requests
 * in flight were answered), subscribers are ended with the feed's (Feed.endSubscribers). A database
 * outage answers 503 before a stream starts, and ends a catch-up with `event: unavailable` after.
 */
import type { FastifyInstance } from 'fastify';
import { Batcher } from '../commit/batcher.ts';
import type { Config } from '../config/config.ts';
import type { Db } from '../db/database.ts';
import type { Feed } from '../feed/feed.ts';
import { errorSchema } from '../http/errors.ts';
import { ApiError } from '../errors.ts';
import { MercureAuthorizer, sendMercureError } from './authorize.ts';
import { openSseStream } from '../http/sse.ts';
import { parseForm, rawQuery } from './form.ts';
import { MERCURE_STREAM } from './frames.ts';
import { MercureStats } from './metrics.ts';
import { HUB_PATH, type MercureUpdate, appendUpdates, updateFromForm } from './publish.ts';
import { givenId, resolveResume } from './resume.ts';
import { MercureSelection, compileRequestSelectors, subscribeRequest } from './subscribe.ts';
import { type ActiveSubscriptions, newSubscriberId } from './subscriptions.ts';

/** This process's hub counters, read by /metrics at scrape time (plain fields: nothing on the hot path). */
export interface MercureDeps {
  config: Config;
  /** Counters for /metrics (default: kept but not reported). */
  stats?: MercureStats;
  db: Db;
  feed: Feed;
  /** Default: one built from the configuration (MERCURE_ISSUERS, MERCURE_RESOURCE, ...). */
  authorizer?: MercureAuthorizer;
  /** Active subscriptions (subscriptions.ts), told of every connection's start and end. */
  subscriptions?: Pick<ActiveSubscriptions, 'opened' | 'closed'>;
}

export async function mercureRoutes(app: FastifyInstance, deps: MercureDeps): Promise<void> {
  const { config, db, feed } = deps;
  const stats = deps.stats ?? new MercureStats();
  const authorizer = deps.authorizer ?? new MercureAuthorizer(config, app.log);
  const hub = authorizer.hub;
  const batcher = new Batcher<MercureUpdate, string>(db, {
    maxEvents: config.batchMaxEvents,
    onCommit: () => feed.tailer.wake(),
    write: (d, updates) => appendUpdates(d, updates),
  });
  app.addHook('onClose', () => batcher.close());

  await app.register(async (scope) => {
    // Form bodies only here (the rest of the API is JSON): raw bytes, parsed strictly by form.ts.
    scope.addContentTypeParser(
      'application/x-www-form-urlencoded',
      { parseAs: 'buffer' },
      (_req, body, done) => done(null, body),
    );

    scope.post(
      HUB_PATH,
      {
        config: { access: 'public' },
        schema: {
          summary: 'Mercure: publish an update',
          description:
            'Body: application/x-www-form-urlencoded with `topic` (one or more; the first is canonical), `data`, `private`, `id`, `type`, `retry` (draft-dunglas-mercure-08). Answers 200 text/plain with the update id. See docs/mercure.md.',
          tags: ['mercure'],
          consumes: ['application/x-www-form-urlencoded'],
          response: {
            200: {
              description: 'the id of the update',
              content: { 'text/plain': { schema: { type: 'string' } } },
            },
            400: errorSchema,
            401: errorSchema,
            403: errorSchema,
            413: errorSchema,
            415: errorSchema,
          },
        },
      },
      async (request, reply) => {
        if (!Buffer.isBuffer(request.body)) {
          throw new ApiError(
            415,
            'unsupported_media_type',
            'a Mercure publish is an application/x-www-form-urlencoded body',
          );
        }
        const update = updateFromForm(parseForm(request.body, 'body'), hub, config.maxEventBytes);
        const auth = await authorizer.authenticate(request, 'publish');
        if (!auth.ok) return sendMercureError(reply, auth);
        // A publish grant on EVERY topic of the update (draft §Publishers), else nothing is stored.
        const grants = auth.grants;
        if (grants === null || !authorizer.canPublish(grants, update.topics)) {
          const no = authorizer.forbidden('the token does not grant publishing on every topic of the update');
          if (!no.ok) return sendMercureError(reply, no);
        }
        const [id] = await batcher.publish([update]);
        stats.published++;
        return reply.type('text/plain; charset=utf-8').send(id);
      },
    );

    scope.get(
      HUB_PATH,
      {
        config: { access: 'public' },
        schema: {
          summary: 'Mercure: subscribe (SSE)',
          description:
            'Query: `match` / `match_exact` (exact topic), `match_urlpattern` (URL Pattern), `*` for every topic, `last_event_id` (the Last-Event-ID header wins). Any other parameter starting with `match` is a 400. See docs/mercure.md.',
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
        },
      },
      async (request, reply) => {
        const req = subscribeRequest(parseForm(rawQuery(request.raw.url ?? ''), 'query'));
        const matcher = compileRequestSelectors(req.selectors, hub);
        const auth = await authorizer.authenticate(request, 'subscribe');
        if (!auth.ok) return sendMercureError(reply, auth);
        const grants = auth.grants;
        const resume = await resolveResume(
          db,
          feed,
          givenId(request.headers['last-event-id'], req.lastEventId),
          config.startWaitMs,
        );
        if (resume.header !== undefined) reply.header('mercure-last-event-id', resume.header);
        const selection = new MercureSelection({
          db,
          tailer: feed.tailer,
          selectors: req.selectors,
          matcher,
          canRead: (topics) => authorizer.canRead(grants, topics),
          endOnReset: resume.found,
          retryMs: config.sseRetryMs,
          stats,
        });
        // The priming frame is an id alone: browsers take it as lastEventId without firing an event.
        // The stream ends when the token expires (draft §Authorization); the client reconnects with a fresh one.
        const stream = openSseStream(request, reply, {
          retryMs: config.sseRetryMs,
          first: `id: ${resume.primedId}\n\n`,
          room: { hub: feed.hub, max: config.maxSseConnections },
          expires:
            grants !== null && Number.isFinite(grants.exp)
              ? { atMs: grants.exp * 1000, frame: ': token expired\n\n' }
              : undefined,
        });
        const subscriber = feed.hub.subscribe([MERCURE_STREAM], resume.cursor, stream.sink, selection);
        const active = deps.subscriptions;
        const conn = active && { subscriber: newSubscriberId(), selectors: req.selectors, grants };
        if (active && conn) void active.opened(conn);
        stats.subscribers++;
        stream.onClose(() => {
          stats.subscribers--;
          feed.hub.unsubscribe(subscriber);
          if (active && conn) void active.closed(conn);
        });
        return reply;
      },
    );
  });
}
