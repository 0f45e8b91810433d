/**
 * startServer: database (embedded or DATABASE_URL) → pools and their checks → migrations → feed →
 * janitor → horizon watch → self-check → queues → flows → webhooks → sampler → HTTP. The long-lived
 * parts are built and started here, in that order, and handed to the app as dependencies, so every
 * route and /metrics sees the same instances.
 *
 * Each part is added to one list as it starts; close() — and a start that fails half-way — stops the
 * list in reverse: the HTTP app first (its preClose stops accepting, answers long-polls, ends SSE
 * streams with a `retry:` hint and waits for the requests in flight: src/http/drain.ts), then the
 * sampler, the webhook workers (deliveries in flight finish), the scheduler and the follower (a step
 * in progress finishes), the queue batchers (queued
 * enqueues and acks are written; their wake-ups still reach a running feed), the self-check, the
 * horizon watcher, the janitor, the feed (in-flight publishes finish; tailer and listener stop), the
 * pools and the embedded database.
 */
import type { FastifyInstance } from 'fastify';
import type { Kysely } from 'kysely';
import pino from 'pino';
import { buildApp } from './app.ts';
import { resolveAuthMode } from './auth/mode.ts';
import type { Config } from './config/config.ts';
import type { Database } from './db/database.ts';
import { configuredDatabase } from './db/embedded.ts';
import { migrate } from './db/migrate.ts';
import { checkPreparedStatements, checkSessionUrl, explainStartupRefusal } from './db/pooler-checks.ts';
import { createPools, type Pools } from './db/pools.ts';
import { Feed } from './feed/feed.ts';
import { recordLostEvents } from './flows/losses.ts';
import { Follower } from './flows/follower.ts';
import { Scheduler } from './flows/scheduler.ts';
import { scheduleTickRetention } from './flows/schedules.ts';
import { mercureTopicRetention } from './mercure/retention.ts';
import { watchHorizon } from './ops/horizon-watch.ts';
import { Sampler } from './ops/sampler.ts';
import { SelfCheck } from './ops/self-check.ts';
import { Queues } from './queues/queues.ts';
import { queueRetention } from './queues/retention.ts';
import { Janitor, type JanitorOptions } from './retention/janitor.ts';
import { attemptRetention } from './webhooks/attempts.ts';
import { Webhooks } from './webhooks/webhooks.ts';

export interface Server {
  app: FastifyInstance;
  db: Kysely<Database>;
  feed: Feed;
  janitor: Janitor;
  queues: Queues;
  follower: Follower;
  scheduler: Scheduler;
  webhooks: Webhooks;
  sampler: Sampler;
  selfCheck: SelfCheck;
  url: string;
  databaseUrl: string;
  close(): Promise<void>;
}

type Log = pino.Logger;

/** `migrate: false`: the schema is known to be current (a cluster worker; its primary migrated). */
export async function startServer(config: Config, opts: { migrate?: boolean } = {}): Promise<Server> {
  // An unsafe access-control setting fails before anything starts (see src/auth/mode.ts).
  resolveAuthMode(config);
  const log = pino({ level: config.logLevel === 'silent' ? 'silent' : config.logLevel });
  const running = new Running(log);
  try {
    const server = await startParts(config, opts, log, running);
    let closing: Promise<void> | undefined;
    return { ...server, close: () => (closing ??= running.stop()) };
  } catch (err) {
    await running.stop().catch(() => {});
    throw err;
  }
}

async function startParts(
  config: Config,
  opts: { migrate?: boolean },
  log: Log,
  running: Running,
): Promise<Omit<Server, 'close'>> {
  const { url: databaseUrl, embedded } = await configuredDatabase(config, log);
  if (embedded) running.add('embedded database', () => embedded.stop());
  const pools = createPools(config, databaseUrl, log);
  running.add('pools', () => pools.close());
  const { db, sessionDb } = pools;
  await checkPools(pools, config);
  if (opts.migrate !== false) {
    const applied = await migrate(sessionDb).catch((err: unknown) => {
      throw explainStartupRefusal(err, pools.pooled ? 'DIRECT_DATABASE_URL' : 'DATABASE_URL');
    });
    if (applied.length > 0) log.info({ applied }, 'migrations applied');
  }
  const { tailDb, sessions: ownSessions, standbys, sessionUrl } = pools;
  const feed = new Feed({ ...config, db, tailDb, databaseUrl: sessionUrl, ownSessions, standbys, log });
  running.add('feed', () => feed.stop(config.sseRetryMs));
  await feed.start();
  const janitor = buildJanitor(sessionDb, config, log);
  running.add('janitor', () => janitor.stop());
  janitor.start();
  // A stalled horizon is logged with the backend holding it, not only exposed in /metrics.
  running.add('horizon watch', watchHorizon({ db, feed, log }));
  // A marker through this process's own delivery path now and then (SELF_CHECK_INTERVAL; 0: off).
  const selfCheck = new SelfCheck({
    db,
    feed,
    intervalMs: config.selfCheckIntervalMs,
    boundMs: config.selfCheckBoundMs,
    misses: config.selfCheckMisses,
    log,
  });
  running.add('self-check', () => selfCheck.stop());
  selfCheck.start();
  const queues = new Queues({ db, feed, batchMaxJobs: config.batchMaxEvents });
  running.add('queues', () => queues.close());
  // Streams and cron schedules feeding queues: every replica may run them (FLOWS).
  const { pageSize, pollIntervalMs } = config;
  const onJobs = (queue: string, n: number) => queues.wakeups.committed(queue, n);
  const follower = new Follower({ db, feed, pageSize, pollIntervalMs, log, onJobs });
  const onEnqueued = () => feed.tailer.wake();
  const scheduler = new Scheduler({ db, lateAfterMs: config.scheduleLateAfterMs, onEnqueued, log });
  if (config.flows) {
    running.add('follower', () => follower.stop());
    follower.start();
    running.add('scheduler', () => scheduler.stop());
    scheduler.start();
  }
  // Webhook delivery workers (WEBHOOKS): every replica may run them; deliveries are the endpoints' jobs.
  const webhooks = new Webhooks({ db, queues, follower, config, log });
  running.add('webhooks', () => webhooks.stop());
  webhooks.start();
  // One sampler per process feeds every open live page (src/ops/sampler.ts).
  const sampler = new Sampler({ db, feed, queues });
  running.add('sampler', () => sampler.stop());
  await sampler.start();
  const { pool } = pools;
  const deps = { config, db, feed, janitor, queues, follower, scheduler, webhooks, pool, sampler, selfCheck };
  const app = await buildApp(deps);
  running.add('HTTP', () => app.close());
  const url = await app.listen({ port: config.port, host: config.host });
  return { ...deps, app, url, databaseUrl };
}

/**
 * The LISTEN connection's URL must be a session of its own (a transaction-mode pool loses other
 * connections' NOTIFYs), and PREPARED_STATEMENTS=true through a pool needs a pool that keeps them
 * (src/db/pooler-checks.ts): both fail the start with what to set.
 */
async function checkPools(pools: Pools, config: Config): Promise<void> {
  await checkSessionUrl({ sessionUrl: pools.sessionUrl, db: pools.db, pooled: pools.pooled });
  if (pools.pooled && config.preparedStatements === true) await checkPreparedStatements(pools.pool);
}

/**
 * The janitor with every feature's retention task (the server and `npm run maint` both build it here).
 * Order matters: queue history, schedule ticks, then the Mercure topic index, which follows the
 * feed's drops of the same pass.
 */
export function buildJanitor(db: Kysely<Database>, config: Config, log: JanitorOptions['log']): Janitor {
  return new Janitor(db, {
    ...config,
    tasks: [
      queueRetention(config),
      scheduleTickRetention(config.retentionMs),
      mercureTopicRetention,
      attemptRetention(config.retentionMs),
    ],
    onDrop: recordLostEvents,
    log,
  });
}

/** The parts started so far; stop() ends them in reverse, once each, and keeps going past a failure. */
class Running {
  private readonly parts: { name: string; stop: () => unknown }[] = [];
  constructor(private readonly log: Log) {}

  add(name: string, stop: () => unknown): void {
    this.parts.push({ name, stop });
  }

  /** Rejects with the first failure, after every part was stopped. */
  async stop(): Promise<void> {
    let failed: unknown;
    for (const part of this.parts.splice(0).reverse()) {
      try {
        await part.stop();
      } catch (err) {
        this.log.warn({ part: part.name, err: (err as Error).message }, 'shutdown: a part failed to stop');
        failed ??= err;
      }
    }
    if (failed !== undefined) throw failed;
  }
}
