/**
 * buildApp: the Fastify instance with its plugins and routes, given already-started dependencies.
 * Tests and main.ts both build it through startServer (server.ts). What belongs to the HTTP app ends
 * with it: the shutdown drain (http/drain.ts) and the Mercure hub's active subscriptions (onClose).
 */
import sensible from '@fastify/sensible';
import Fastify, { type FastifyInstance, type FastifyServerOptions, LogController } from 'fastify';
import type { Kysely } from 'kysely';
import type pg from 'pg';
import { registerAccess } from './auth/access.ts';
import { workerIndex } from './cluster/worker.ts';
import { redactedRequest } from './auth/redact.ts';
import type { Config } from './config/config.ts';
import type { Database } from './db/database.ts';
import { poolMetrics } from './db/metrics.ts';
import { feedMetrics } from './feed/metrics.ts';
import { followerMetrics, schedulerMetrics } from './flows/metrics.ts';
import { queueMetrics } from './queues/metrics.ts';
import type { Janitor } from './retention/janitor.ts';
import { retentionMetrics } from './retention/metrics.ts';
import { installDrain } from './http/drain.ts';
import { installErrorHandlers } from './http/errors.ts';
import type { Feed } from './feed/feed.ts';
import { installFiniteNumbers, installJsonParser } from './http/input.ts';
import { cachedSerializer, strictBodyValidator } from './http/validation.ts';
import { registerDocs } from './ops/docs.ts';
import { healthRoutes } from './ops/health.ts';
import { MercureAuthorizer } from './mercure/authorize.ts';
import { discoveryRoutes } from './mercure/discovery.ts';
import { lastUpdateId, loadMercureIds } from './mercure/queries.ts';
import { MercureStats } from './mercure/metrics.ts';
import { mercureRoutes } from './mercure/routes.ts';
import { ActiveSubscriptions } from './mercure/active-subscriptions.ts';
import { activeSubscriptionRoutes } from './mercure/active-subscription-routes.ts';
import { liveRoutes } from './ops/live.ts';
import { metricsRoutes } from './ops/metrics.ts';
import type { Sampler } from './ops/sampler.ts';
import type { SelfCheck } from './ops/self-check.ts';
import { uiRoutes } from './ops/ui.ts';
import type { Queues } from './queues/queues.ts';
import { queueRoutes } from './queues/routes.ts';
import type { Follower } from './flows/follower.ts';
import { FLOW_TAGS, flowRoutes } from './flows/routes.ts';
import type { Scheduler } from './flows/scheduler.ts';
import { streamListRoutes } from './streams/list.ts';
import { streamRoutes } from './streams/routes.ts';
import { txRoutes } from './tx/routes.ts';
import { webhookMetrics } from './webhooks/metrics.ts';
import { WEBHOOK_TAG, webhookRoutes } from './webhooks/routes.ts';
import type { Webhooks } from './webhooks/webhooks.ts';

export interface AppDeps {
  config: Config;
  db: Kysely<Database>;
  feed: Feed;
  queues: Queues;
  janitor: Janitor;
  /** Stream subscriptions and cron schedules (their routes are served only with both). */
  follower?: Follower;
  scheduler?: Scheduler;
  /** Webhook endpoints and their delivery workers (the routes are served only with one). */
  webhooks?: Webhooks;
  /** The query pool, for /metrics (optional: its gauges are left out without it). */
  pool?: pg.Pool;
  /** The live page's sampler (GET /v1/ops/live is served only with one). */
  sampler?: Sampler;
  /** The delivery self-check, for /readyz and /metrics. */
  selfCheck?: SelfCheck;
}

/** Fastify's own options: logging, limits, validation and shutdown behaviour. */
function fastifyOptions(config: Config): FastifyServerOptions {
  return {
    logger:
      config.logLevel === 'silent'
        ? false
        : // The request serializer hides `access_token` and `authorization` values from request logs.
          { level: config.logLevel, serializers: { req: redactedRequest } },
    // Per-request log lines cost more than the request at 10K/s: only at debug/trace.
    logController: new LogController({
      disableRequestLogging: config.logLevel !== 'debug' && config.logLevel !== 'trace',
    }),
    bodyLimit: config.maxBodyBytes,
    // Long names must reach the schema (400 invalid_name), not fall through to a 404.
    routerOptions: { maxParamLength: 2048 },
    // Unknown query parameters are errors, not silently dropped.
    ajv: { customOptions: { removeAdditional: false, allErrors: false } },
    // JSON bodies are validated as sent (no type coercion); query strings and paths keep it. Both
    // compilers keep what they built for the process (src/http/validation.ts).
    schemaController: {
      compilersFactory: { buildValidator: strictBodyValidator(), buildSerializer: cachedSerializer() },
    },
    // Requests during shutdown get 503 with Retry-After from server.ts (Fastify's own has none).
    return503OnClosing: false,
    // close() runs preClose first, which answers every request in flight (server.ts); any
    // keep-alive socket left after that is idle and dropped instead of holding shutdown open.
    forceCloseConnections: true,
  };
}

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const app = Fastify(fastifyOptions(deps.config));
  await app.register(sensible);
  // WORKERS > 1: every response names the worker that served it (for operators and tests).
  const worker = workerIndex();
  if (worker !== undefined) {
    const name = String(worker);
    app.addHook('onRequest', async (_request, reply) => {
      reply.header('commitfeed-worker', name);
    });
  }
  // JSON only: a text/plain body is a 415, not a string that fails validation later.
  app.removeContentTypeParser('text/plain');
  installErrorHandlers(app);
  // Shutdown answers what is in flight and ends what never ends on its own (long-polls, streams).
  const { feed, queues, follower, scheduler, pool, webhooks } = deps;
  installDrain(app, {
    retryMs: deps.config.sseRetryMs,
    release: () => {
      queues.releaseWaiters();
      feed.endSubscribers(deps.config.sseRetryMs);
    },
  });
  // Strict JSON (valid UTF-8, bounded nesting); then CORS and tokens, before any route (src/auth).
  installJsonParser(app);
  installFiniteNumbers(app);
  await registerAccess(app, deps.config);
  // Before every route: the spec is collected as routes are added.
  await registerDocs(app, [...(follower && scheduler ? FLOW_TAGS : []), ...(webhooks ? [WEBHOOK_TAG] : [])]);
  uiRoutes(app);
  healthRoutes(app, deps);
  const mercureStats = new MercureStats();
  metricsRoutes(app, {
    config: deps.config,
    parts: [
      feedMetrics(feed),
      retentionMetrics(deps.db, deps.janitor),
      queueMetrics(deps.db, queues),
      ...(follower ? [followerMetrics(deps.db, follower)] : []),
      ...(scheduler ? [schedulerMetrics(scheduler)] : []),
      ...(webhooks ? [webhookMetrics(deps.db, webhooks)] : []),
      ...(pool ? [poolMetrics(pool)] : []),
      ...(deps.selfCheck ? [deps.selfCheck] : []),
      mercureStats,
    ],
  });
  if (deps.sampler) liveRoutes(app, { sampler: deps.sampler, config: deps.config });
  streamRoutes(app, deps);
  streamListRoutes(app, deps);
  queueRoutes(app, deps);
  if (deps.follower && deps.scheduler) {
    flowRoutes(app, { ...deps, follower: deps.follower, scheduler: deps.scheduler });
  }
  txRoutes(app, deps);
  if (webhooks) webhookRoutes(app, { ...deps, webhooks });
  await mercureHub(app, deps, mercureStats);
  return app;
}

/**
 * The Mercure hub: its authorizer (MERCURE_ISSUERS), the hub routes, the discovery metadata and, with
 * MERCURE_SUBSCRIPTIONS, active subscriptions (their lease starts with the app and ends with it).
 */
async function mercureHub(app: FastifyInstance, deps: AppDeps, stats: MercureStats): Promise<void> {
  const authorizer = new MercureAuthorizer(deps.config, app.log);
  const ids = await loadMercureIds(deps.db);
  let activeSubscriptions: ActiveSubscriptions | undefined;
  if (deps.config.mercureSubscriptions) {
    const active = new ActiveSubscriptions(
      deps.db,
      authorizer,
      new URL(authorizer.hub).pathname,
      deps.config.mercureInstanceLeaseMs,
      app.log,
    );
    await active.start();
    app.addHook('onClose', () =>
      active
        .stop()
        .catch((err) => app.log.warn({ err }, 'Mercure: could not end this instance’s subscriptions')),
    );
    activeSubscriptionRoutes(app, {
      activeSubscriptions: active,
      authorizer,
      lastEventId: async () => (await lastUpdateId(deps.db, deps.feed.tailer.position, ids)) ?? 'earliest',
      legacy: deps.config.mercureProtocolCompatibility === 8,
    });
    activeSubscriptions = active;
  }
  await mercureRoutes(app, { ...deps, authorizer, activeSubscriptions, stats, ids });
  discoveryRoutes(app, deps.config, { activeSubscriptions: activeSubscriptions !== undefined });
}
