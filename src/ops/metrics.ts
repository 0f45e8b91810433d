/**
 * `GET /metrics` in the Prometheus text format (prom-client). Nothing here runs on the hot path: the
 * feed's modules already keep plain counters (`stats` on the batcher, tailer, listener and hub), and
 * every metric is read from them at scrape time. Each app has its own registry, so several servers
 * in one process (tests) do not collide.
 *
 * Two values cost a query per scrape, both cheap: feed lag (age of the oldest row past the tailer's
 * position, one primary-key probe) and, only while the horizon is stalled, the backend holding it
 * (pid, application_name, transaction age from pg_stat_activity). A failed query leaves those gauges
 * at -1 rather than failing the scrape.
 */
import type { FastifyInstance } from 'fastify';
import { type Kysely, sql } from 'kysely';
import type pg from 'pg';
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import type { Database } from '../db/database.ts';
import type { Feed } from '../feed/feed.ts';
import { watchHorizon } from './horizon-watch.ts';
import { type FeedStats, feedStats } from '../retention/partitions.ts';

export interface MetricsDeps {
  db: Kysely<Database>;
  feed: Feed;
  pool?: pg.Pool;
  /** METRICS_REQUIRE_ADMIN: with auth on, a token with `admin: true` is needed (else public). */
  config?: { metricsRequireAdmin: boolean };
}

/** The oldest open writing transaction (the one holding the horizon back), if any. */
export async function horizonBlocker(
  db: Kysely<Database>,
): Promise<{ pid: number; applicationName: string; ageSeconds: number } | undefined> {
  const { rows } = await sql<{ pid: number; application_name: string; age: number }>`
    select pid, application_name, extract(epoch from clock_timestamp() - xact_start)::float8 as age
    from pg_stat_activity
    where backend_xid is not null and pid <> pg_backend_pid()
    order by age(backend_xid) desc
    limit 1`.execute(db);
  const r = rows[0];
  return r ? { pid: r.pid, applicationName: r.application_name, ageSeconds: r.age } : undefined;
}

export function buildRegistry(deps: MetricsDeps): Registry {
  const { feed, db, pool } = deps;
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'commitfeed_' });

  // A counter whose value is copied from a module's own counter at scrape time.
  const mirror = (name: string, help: string, read: () => number) =>
    new Counter({
      name,
      help,
      registers: [registry],
      collect() {
        this.reset();
        this.inc(read());
      },
    });
  const gauge = (name: string, help: string, read: () => number | Promise<number>) =>
    new Gauge({
      name,
      help,
      registers: [registry],
      async collect() {
        this.set(await read());
      },
    });

  const b = feed.batcher.stats;
  mirror(
    'commitfeed_publishes_total',
    'Publish requests committed (a batch publish counts once)',
    () => b.requests,
  );
  mirror(
    'commitfeed_events_written_total',
    'Events appended through the group-commit writer',
    () => b.events,
  );
  mirror(
    'commitfeed_commits_total',
    'Group-commit statements committed; each issues one NOTIFY. events_written / commits = mean batch size',
    () => b.statements,
  );
  gauge('commitfeed_commit_batch_size_mean', 'Mean events per group-commit statement since start', () =>
    b.statements === 0 ? 0 : b.events / b.statements,
  );

  const wakes = new Counter({
    name: 'commitfeed_tailer_wakes_total',
    help: 'Tailer wake-ups by source: notify (LISTEN), local (own commit), fallback (timer: idle poll, re-poll behind the horizon, error backoff)',
    labelNames: ['source'],
    registers: [registry],
    collect() {
      this.reset();
      this.inc({ source: 'notify' }, feed.listener.stats.notifications - feed.listener.stats.own);
      this.inc({ source: 'local' }, b.statements);
      this.inc({ source: 'fallback' }, feed.tailer.stats.fallbackWakes);
    },
  });
  void wakes;
  mirror(
    'commitfeed_notifications_received_total',
    'NOTIFYs heard on the LISTEN connection',
    () => feed.listener.stats.notifications,
  );
  mirror(
    'commitfeed_notifications_own_total',
    "NOTIFYs sent by this process's own connections, not acted on (their commits wake the tailer directly)",
    () => feed.listener.stats.own,
  );
  mirror(
    'commitfeed_listener_reconnects_total',
    'LISTEN connection re-established after a loss',
    () => feed.listener.stats.reconnects,
  );
  gauge('commitfeed_listener_connected', '1 while the LISTEN connection is up', () =>
    feed.listener.connected ? 1 : 0,
  );
  mirror('commitfeed_tailer_polls_total', 'Reads of the global feed tail', () => feed.tailer.stats.reads);
  mirror(
    'commitfeed_tailer_events_total',
    'Events read from the feed tail into the window',
    () => feed.tailer.stats.events,
  );
  mirror(
    'commitfeed_tailer_errors_total',
    'Failed tail reads (retried with backoff)',
    () => feed.tailer.stats.errors,
  );

  gauge(
    'commitfeed_horizon_stall_seconds',
    'How long committed rows have waited behind the transaction horizon (an older transaction still open); 0 when none wait',
    () => feed.tailer.horizonStallMs / 1000,
  );
  const blocker = new Gauge({
    name: 'commitfeed_horizon_blocker_age_seconds',
    help: 'While the horizon is stalled: transaction age of the oldest open writing backend, labelled by pid and application_name',
    labelNames: ['pid', 'application_name'],
    registers: [registry],
    async collect() {
      this.reset();
      if (feed.tailer.horizonStallMs === 0) return;
      const r = await horizonBlocker(db).catch(() => undefined);
      if (r) this.set({ pid: String(r.pid), application_name: r.applicationName }, r.ageSeconds);
    },
  });
  void blocker;
  gauge(
    'commitfeed_feed_lag_seconds',
    'Age of the oldest feed row past the position this process has delivered up to (0 when caught up; -1 if the database cannot be read)',
    async () => {
      const p = feed.tailer.position;
      try {
        const { rows } = await sql<{ age: number }>`
          select extract(epoch from clock_timestamp() - created_at)::float8 as age
          from commitfeed.feed
          where (txid, id) > (${String(p.txid)}::xid8, ${p.id}::int8)
          order by txid, id limit 1`.execute(db);
        return rows.length === 0 ? 0 : Math.max(0, rows[0].age);
      } catch {
        return -1;
      }
    },
  );

  // Retention (issue #7): one feedStats read per scrape (catalog sizes, one index probe), shared by
  // the gauges below; -1 when the database cannot be read.
  let statsAt = 0;
  let statsP: Promise<FeedStats | undefined> = Promise.resolve(undefined);
  const retention = () => {
    if (Date.now() - statsAt > 1000) {
      statsAt = Date.now();
      statsP = feedStats(db).catch(() => undefined);
    }
    return statsP;
  };
  gauge(
    'commitfeed_feed_bytes',
    'Bytes on disk of the feed (every partition, indexes included)',
    async () => {
      const s = await retention();
      return s ? s.bytes : -1;
    },
  );
  gauge('commitfeed_feed_partitions', 'Partitions of the feed (the default partition included)', async () => {
    const s = await retention();
    return s ? s.partitions.length : -1;
  });
  gauge(
    'commitfeed_feed_oldest_event_age_seconds',
    'Age of the oldest retained event (0 when the feed is empty)',
    async () => {
      const s = await retention();
      if (!s) return -1;
      return s.oldestEventAt ? Math.max(0, (Date.now() - s.oldestEventAt.getTime()) / 1000) : 0;
    },
  );
  gauge(
    'commitfeed_janitor_last_run_timestamp_seconds',
    'When the last maintenance run (by any instance) started, Unix time (0: never)',
    async () => {
      const s = await retention();
      if (!s) return -1;
      return s.lastRun ? s.lastRun.startedAt.getTime() / 1000 : 0;
    },
  );
  gauge('commitfeed_janitor_last_run_duration_seconds', 'Duration of the last maintenance run', async () => {
    const s = await retention();
    if (!s) return -1;
    return s.lastRun ? s.lastRun.durationMs / 1000 : 0;
  });
  mirror(
    'commitfeed_janitor_runs_skipped_total',
    'Maintenance runs this process skipped because another instance held the lock',
    () => feed.janitor.stats.skipped,
  );

  const hub = feed.hub;
  gauge('commitfeed_sse_connections', 'Open SSE subscriptions in this process', () => hub.subscriberCount);
  mirror(
    'commitfeed_sse_frames_total',
    'Event frames written to SSE subscribers (live and catch-up)',
    () => hub.stats.frames,
  );
  mirror(
    'commitfeed_sse_live_writes_total',
    'Socket writes by the live fan-out (one per subscriber per page)',
    () => hub.stats.delivered,
  );
  mirror(
    'commitfeed_sse_slow_dropped_total',
    'SSE subscribers dropped because their socket took nothing for SLOW_SUBSCRIBER_TIMEOUT',
    () => hub.stats.dropped,
  );
  gauge(
    'commitfeed_sse_buffered_bytes',
    'Bytes written to SSE sockets and not yet taken by the clients',
    () => hub.bufferedBytes(),
  );

  if (pool) {
    const poolGauge = new Gauge({
      name: 'commitfeed_pg_pool_connections',
      help: 'Query pool connections by state (total, idle) and requests waiting for one (waiting)',
      labelNames: ['state'],
      registers: [registry],
      collect() {
        this.set({ state: 'total' }, pool.totalCount);
        this.set({ state: 'idle' }, pool.idleCount);
        this.set({ state: 'waiting' }, pool.waitingCount);
      },
    });
    void poolGauge;
  }
  return registry;
}

/** Registers `GET /metrics`. */
export function metricsRoutes(app: FastifyInstance, deps: MetricsDeps): void {
  const registry = buildRegistry(deps);
  // A stalled horizon is also logged (with the blocking backend), not only exposed here.
  watchHorizon(app, deps);
  const access = deps.config?.metricsRequireAdmin ? 'admin' : 'public';
  app.get(
    '/metrics',
    { schema: { summary: 'Prometheus metrics' }, config: { access } },
    async (_req, reply) => {
      reply.type(registry.contentType);
      return registry.metrics();
    },
  );
}
