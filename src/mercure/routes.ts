/**
 * The Mercure hub's routes at /.well-known/mercure (draft-08): POST publishes an update (a form
 * body; publish-route.ts), GET subscribes over SSE (subscribe-route.ts). No SQL here: publishes go
 * through the feed's group commit with native publishes (commitfeed.append_plain), subscribers
 * through the feed's tailer and hub as a Selection (subscribe.ts), so Mercure updates share the
 * native API's order, catch-up, hand-over, backpressure and retention.
 *
 * The native token hook treats these routes as public: the hub authenticates on its own (Mercure
 * tokens, MERCURE_ISSUERS; see the authorizer) and never reads `access_token` or the native cookie.
 *
 * Lifecycle: registered once per app; the feed's batcher is closed with the feed (after the app's
 * requests in flight were answered), subscribers are ended with the feed's (Feed.endSubscribers). A
 * database outage answers 503 before a stream starts, and ends a catch-up with `event: unavailable`
 * after.
 */
import type { FastifyInstance } from 'fastify';
import type { Config } from '../config/config.ts';
import type { Db } from '../db/database.ts';
import type { Feed } from '../feed/feed.ts';
import type { ActiveSubscriptions } from './active-subscriptions.ts';
import type { MercureAuthorizer } from './authorize.ts';
import type { MercureIds } from './ids.ts';
import type { MercureStats } from './metrics.ts';
import { publishRoute } from './publish-route.ts';
import { subscribeRoute } from './subscribe-route.ts';

export interface MercureDeps {
  config: Config;
  /** This process's hub counters, read by /metrics at scrape time (plain fields: nothing on the hot path). */
  stats: MercureStats;
  db: Db;
  feed: Feed;
  /** Built from the configuration (MERCURE_ISSUERS, MERCURE_RESOURCE, ...). */
  authorizer: MercureAuthorizer;
  /** Active subscriptions (active-subscriptions.ts), told of every subscriber's start and end. */
  activeSubscriptions?: Pick<ActiveSubscriptions, 'opened' | 'closed'>;
  /** The database's generated ids (ids.ts). */
  ids: MercureIds;
}

export async function mercureRoutes(app: FastifyInstance, deps: MercureDeps): Promise<void> {
  const { config, db, feed, stats, authorizer, ids } = deps;
  await app.register(async (scope) => {
    // Form bodies only here (the rest of the API is JSON): raw bytes, parsed strictly by form.ts.
    scope.addContentTypeParser(
      'application/x-www-form-urlencoded',
      { parseAs: 'buffer' },
      (_req, body, done) => done(null, body),
    );
    publishRoute(scope, { config, authorizer, batcher: feed.batcher, stats, ids });
    subscribeRoute(scope, {
      config,
      db,
      feed,
      authorizer,
      stats,
      activeSubscriptions: deps.activeSubscriptions,
      ids,
    });
  });
}
