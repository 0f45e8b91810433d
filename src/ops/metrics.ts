/**
 * `GET /metrics` in the Prometheus text format (prom-client). Nothing here runs on the hot path: the
 * feed's modules already keep plain counters (`stats` on the batcher, tailer, listener and hub; the
 * queues' `counters`), and every metric is read from them at scrape time. Each app has its own
 * registry, so several servers in one process (tests) do not collide.
 *
 * A few values cost a query per scrape, each cheap and shared by the gauges that need it: feed lag
 * (age of the oldest row past the tailer's position, one primary-key probe); retention (catalog
 * sizes, one index probe); queue depth by state and oldest ready age (one grouped read of the jobs
 * table, which holds only unfinished and dead jobs); and, only while the horizon is stalled, the
 * backend holding it (pid, application_name, transaction age from pg_stat_activity). A failed query
 * leaves its gauges at -1 (or without samples, for labelled ones) rather than failing the scrape.
 */
import type { FastifyInstance } from 'fastify';
import { type Kysely, sql } from 'kysely';
import type pg from 'pg';
import {
  AggregatorRegistry,
  Counter,
  Gauge,
  Histogram,
  type MetricType,
  Registry,
  collectDefaultMetrics,
} from 'prom-client';
import { type MetricJson, clusterMetrics, serveClusterMetrics, workerIndex } from '../cluster/worker.ts';
import { unavailable } from '../errors.ts';
import type { Database } from '../db/database.ts';
import type { Feed } from '../feed/feed.ts';
import type { StandbyStatus } from '../feed/reads.ts';
import { type QueueStats, queueStats } from '../queues/admin.ts';
import type { QueueCounts, WaitTimes } from '../queues/counters.ts';
import type { Queues } from '../queues/queues.ts';
import { type FeedStats, feedStats } from '../retention/partitions.ts';
import { horizonBlocker } from './horizon.ts';
import type { Follower } from '../flows/follower.ts';
import type { MercureStats } from '../mercure/routes.ts';
import { registerFlowMetrics } from '../flows/metrics.ts';
import { mirrorCounter } from './mirror.ts';
import type { Scheduler } from '../flows/scheduler.ts';

export interface MetricsDeps {
  db: Kysely<Database>;
  feed: Feed;
  queues: Queues;
  follower?: Follower;
  scheduler?: Scheduler;
  pool?: pg.Pool;
  /** The Mercure hub's counters (src/mercure/routes.ts). */
  mercure?: MercureStats;
  /** METRICS_REQUIRE_ADMIN: with auth on, a token with `admin: true` is needed (else public). */
  config?: { metricsRequireAdmin: boolean };
}

/**
 * One database read per scrape, shared by the gauges that need it: the first gauge to ask in a scrape
 * starts it, the others get the same answer; undefined when the read failed.
 */
class PerScrape {
  private generation = 0;

  /** Called as a scrape begins: later reads are fresh. */
  next(): void {
    this.generation++;
  }

  read<T>(fetch: () => Promise<T>): () => Promise<T | undefined> {
    let at = -1;
    let p: Promise<T | undefined> = Promise.resolve(undefined);
    return () => {
      if (at !== this.generation) {
        at = this.generation;
        p = fetch().catch(() => undefined);
      }
      return p;
    };
  }
}

/** A histogram whose buckets are copied from a module's own WaitTimes at scrape time. */
class MirroredHistogram extends Histogram {
  constructor(
    private readonly config: { name: string; help: string; registers: Registry[] },
    private readonly read: () => WaitTimes,
  ) {
    super({ ...config, buckets: [...read().bounds] });
  }

  // The registry formats a histogram from this method when it has one (prom-client's do), else get().
  async getForPromString() {
    return this.get();
  }

  override async get() {
    const { name, help } = this.config;
    const w = this.read();
    const cumulative = w.cumulative();
    const bucket = `${name}_bucket`;
    return {
      name,
      help,
      // prom-client's runtime type tags are strings; its typings declare a numeric enum.
      type: 'histogram' as unknown as MetricType,
      aggregator: 'sum' as const,
      collect: () => {},
      values: [
        ...w.bounds.map((le, i) => ({ labels: { le }, value: cumulative[i], metricName: bucket })),
        { labels: { le: '+Inf' }, value: w.count, metricName: bucket },
        { labels: {}, value: w.sum, metricName: `${name}_sum` },
        { labels: {}, value: w.count, metricName: `${name}_count` },
      ],
    };
  }
}

/** The registry with every metric, and `scrape()` (text) and `json()` (for the cluster's sum), which
 * render it with fresh shared reads. */
export function buildRegistry(deps: MetricsDeps): {
  registry: Registry;
  scrape(): Promise<string>;
  json(): Promise<MetricJson[]>;
} {
  const { feed, queues, db, pool } = deps;
  const registry = new Registry();
  const perScrape = new PerScrape();
  collectDefaultMetrics({ register: registry, prefix: 'commitfeed_' });
  registerFlowMetrics(registry, deps);

  const mirror = (name: string, help: string, read: () => number) =>
    mirrorCounter(registry, name, help, read);
  // `aggregator`: how WORKERS > 1 combines the workers' values in the server-wide /metrics (sum by
  // default; `max` for figures every worker reads from the same database).
  const gauge = (
    name: string,
    help: string,
    read: () => number | Promise<number>,
    aggregator: 'sum' | 'max' | 'average' = 'sum',
  ) =>
    new Gauge({
      name,
      help,
      aggregator,
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
  gauge(
    'commitfeed_commit_batch_size_mean',
    'Mean events per group-commit statement since start',
    () => (b.statements === 0 ? 0 : b.events / b.statements),
    'average',
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
    'commitfeed_tailer_deferred_wakes_total',
    'Commit wake-ups deferred by up to IDLE_READ_DELAY because nobody in this process waited for events',
    () => feed.tailer.stats.deferredWakes,
  );
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
  mirror(
    'commitfeed_tailer_own_events_total',
    'Events this process committed that the tail read did not send back: the tailer took them from memory (src/feed/own-writes.ts)',
    () => feed.own.stats.recorded,
  );
  mirror(
    'commitfeed_tailer_own_events_unheld_total',
    'Events this process committed that were read back from the table because too many were already held (rows waiting behind the horizon)',
    () => feed.own.stats.skipped,
  );

  if (feed.reads.configured) {
    // Across workers (WORKERS > 1): `up` is the least any worker sees, lag the most.
    const standbyGauge = (
      name: string,
      help: string,
      value: (s: StandbyStatus) => number,
      aggregator: 'min' | 'max',
    ) =>
      new Gauge({
        name,
        help,
        aggregator,
        labelNames: ['standby'],
        registers: [registry],
        collect() {
          this.reset();
          for (const s of feed.reads.status()) this.set({ standby: s.name }, value(s));
        },
      });
    standbyGauge(
      'commitfeed_standby_up',
      '1 while the standby serves feed reads (state ok)',
      (s) => (s.state === 'ok' ? 1 : 0),
      'min',
    );
    standbyGauge(
      'commitfeed_standby_lag_bytes',
      'WAL bytes the standby had yet to replay at the last probe (-1: unreachable)',
      (s) => s.lagBytes,
      'max',
    );
    mirror(
      'commitfeed_standby_reads_total',
      'Feed reads (tail and catch-up pages) served by a standby',
      () => feed.reads.stats.standby,
    );
    mirror(
      'commitfeed_standby_fallback_reads_total',
      'Feed reads that went to the primary although standbys are configured (none usable, lagging past READ_LAG_WAIT, or failed)',
      () => feed.reads.stats.fallbacks,
    );
    mirror(
      'commitfeed_standby_replay_waits_total',
      "Pauses of a woken tail read waiting for the standby to replay the primary's WAL position",
      () => feed.reads.stats.replayWaits,
    );
  }

  gauge(
    'commitfeed_tailer_floor_age_seconds',
    'How far the tail floor trails now: tail reads skip the partitions wholly before it (TAIL_FLOOR_MARGIN behind what was proved; it grows while an open transaction holds the horizon back); -1 with no floor yet or the floor off',
    () => {
      const at = feed.tailer.floorAtMs;
      return at === Number.NEGATIVE_INFINITY ? -1 : (Date.now() - at) / 1000;
    },
    'max',
  );
  gauge(
    'commitfeed_horizon_stall_seconds',
    'How long committed rows have waited behind the transaction horizon (an older transaction still open); 0 when none wait',
    () => feed.tailer.horizonStallMs / 1000,
    'max',
  );
  const blocker = new Gauge({
    name: 'commitfeed_horizon_blocker_age_seconds',
    help: 'While the horizon is stalled: transaction age of the oldest open writing backend, labelled by pid and application_name',
    labelNames: ['pid', 'application_name'],
    aggregator: 'max',
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
    'max',
  );

  // Retention: one feedStats read per scrape (catalog sizes, one index probe), shared by the gauges
  // below; -1 when the database cannot be read.
  const retention: () => Promise<FeedStats | undefined> = perScrape.read(() => feedStats(db));
  gauge(
    'commitfeed_feed_bytes',
    'Bytes on disk of the feed (every partition, indexes included)',
    async () => {
      const s = await retention();
      return s ? s.bytes : -1;
    },
    'max',
  );
  gauge(
    'commitfeed_feed_partitions',
    'Partitions of the feed (the default partition included)',
    async () => {
      const s = await retention();
      return s ? s.partitions.length : -1;
    },
    'max',
  );
  gauge(
    'commitfeed_feed_oldest_event_age_seconds',
    'Age of the oldest retained event (0 when the feed is empty)',
    async () => {
      const s = await retention();
      if (!s) return -1;
      return s.oldestEventAt ? Math.max(0, (Date.now() - s.oldestEventAt.getTime()) / 1000) : 0;
    },
    'max',
  );
  gauge(
    'commitfeed_janitor_last_run_timestamp_seconds',
    'When the last maintenance run (by any instance) started, Unix time (0: never)',
    async () => {
      const s = await retention();
      if (!s) return -1;
      return s.lastRun ? s.lastRun.startedAt.getTime() / 1000 : 0;
    },
    'max',
  );
  gauge(
    'commitfeed_janitor_last_run_duration_seconds',
    'Duration of the last maintenance run',
    async () => {
      const s = await retention();
      if (!s) return -1;
      return s.lastRun ? s.lastRun.durationMs / 1000 : 0;
    },
    'max',
  );
  mirror(
    'commitfeed_janitor_runs_skipped_total',
    'Maintenance runs this process skipped because another instance held the lock',
    () => feed.janitor.stats.skipped,
  );

  // Queues: depth from the tables (every instance sees the same), activity from this process's
  // counters. One queueStats read per scrape serves the depth gauges.
  const depth: () => Promise<QueueStats[] | undefined> = perScrape.read(() => queueStats(db, null));
  gauge(
    'commitfeed_queues',
    'Queues in the database (-1 if the database cannot be read)',
    async () => {
      const all = await depth();
      return all ? all.length : -1;
    },
    'max',
  );
  const jobsGauge = new Gauge({
    name: 'commitfeed_queue_jobs',
    help: 'Jobs by queue and state: ready (claimable now), delayed (waiting for their run time), leased (held by a live lease), dead (dead-lettered)',
    labelNames: ['queue', 'state'],
    aggregator: 'max',
    registers: [registry],
    async collect() {
      this.reset();
      for (const q of (await depth()) ?? []) {
        this.set({ queue: q.name, state: 'ready' }, q.ready);
        this.set({ queue: q.name, state: 'delayed' }, q.delayed);
        this.set({ queue: q.name, state: 'leased' }, q.leased);
        this.set({ queue: q.name, state: 'dead' }, q.dead);
      }
    },
  });
  void jobsGauge;
  const oldestGauge = new Gauge({
    name: 'commitfeed_queue_oldest_ready_age_seconds',
    help: 'Seconds the oldest claimable job of each queue has waited (0 when none)',
    labelNames: ['queue'],
    aggregator: 'max',
    registers: [registry],
    async collect() {
      this.reset();
      for (const q of (await depth()) ?? []) this.set({ queue: q.name }, q.oldestReadyAgeSeconds);
    },
  });
  void oldestGauge;

  const counts = queues.counters;
  // A per-queue counter copied from the queues' own counts at scrape time.
  const byQueue = (name: string, help: string, read: (c: QueueCounts) => number) =>
    new Counter({
      name,
      help,
      labelNames: ['queue'],
      registers: [registry],
      collect() {
        this.reset();
        for (const [queue, c] of counts.byQueue) this.inc({ queue }, read(c));
      },
    });
  byQueue(
    'commitfeed_queue_jobs_enqueued_total',
    'Jobs enqueued through this process (a duplicate of an existing key not counted)',
    (c) => c.enqueued,
  );
  byQueue('commitfeed_queue_jobs_claimed_total', 'Jobs handed out by claims', (c) => c.claimed);
  byQueue('commitfeed_queue_acks_total', 'Jobs completed by an ack holding their live lease', (c) => c.acked);
  const nacks = new Counter({
    name: 'commitfeed_queue_nacks_total',
    help: 'Nacked jobs by outcome: retry (scheduled again after a backoff) or dead (attempts used up)',
    labelNames: ['queue', 'outcome'],
    registers: [registry],
    collect() {
      this.reset();
      for (const [queue, c] of counts.byQueue) {
        this.inc({ queue, outcome: 'retry' }, c.nackedRetry);
        this.inc({ queue, outcome: 'dead' }, c.nackedDead);
      }
    },
  });
  void nacks;
  byQueue(
    'commitfeed_queue_lease_expiries_total',
    "Leases found expired and released by this process's claims (the worker vanished or overran its lease)",
    (c) => c.leasesExpired,
  );
  byQueue(
    'commitfeed_queue_dead_letters_total',
    'Jobs dead-lettered: by a nack on the last attempt, or by a lease expiring on it',
    (c) => c.deadLettered,
  );
  byQueue(
    'commitfeed_queue_jobs_cancelled_total',
    'Jobs cancelled before a worker took them',
    (c) => c.cancelled,
  );
  mirror(
    'commitfeed_queue_claim_wakeups_total',
    'Waiting claims woken to look for jobs (by an enqueue, retry, release or due time; at most one per job they can take)',
    () => queues.wakeups.woken,
  );
  mirror(
    'commitfeed_queue_jobs_handed_off_total',
    'Jobs an enqueue leased straight to a claim of this process waiting for them (no claim statement)',
    () => queues.wakeups.handedOff,
  );
  mirror(
    'commitfeed_queue_claims_empty_total',
    'Claims that answered without jobs (the wait ran out, the client left, or shutdown)',
    () => counts.emptyClaims,
  );
  gauge(
    'commitfeed_queue_claims_waiting',
    'Long-poll claims waiting in this process',
    () => queues.wakeups.size,
  );
  new MirroredHistogram(
    {
      name: 'commitfeed_queue_claim_wait_seconds',
      help: 'Time from a claim request to its answer, for claims that returned jobs (long-polls included)',
      registers: [registry],
    },
    () => counts.claimWait,
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
  const mercure = deps.mercure;
  if (mercure) {
    mirror(
      'commitfeed_mercure_updates_published_total',
      'Mercure updates committed through POST /.well-known/mercure (not the SQL function or /v1/tx)',
      () => mercure.published,
    );
    gauge(
      'commitfeed_mercure_subscribers',
      'Open Mercure hub subscriber connections',
      () => mercure.subscribers,
    );
    mirror(
      'commitfeed_mercure_frames_total',
      'Update frames written to Mercure subscribers (live and catch-up)',
      () => mercure.frames,
    );
  }
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
  const worker = workerIndex();
  if (worker !== undefined) {
    new Gauge({
      name: 'commitfeed_worker_info',
      help: 'A worker of this server (WORKERS > 1), by index and pid; always 1',
      labelNames: ['worker', 'pid'],
      registers: [registry],
      collect() {
        this.set({ worker: String(worker), pid: String(process.pid) }, 1);
      },
    });
  }
  return {
    registry,
    scrape() {
      perScrape.next();
      return registry.metrics();
    },
    json() {
      perScrape.next();
      return registry.getMetricsAsJSON();
    },
  };
}

/**
 * With WORKERS > 1, the whole server's metrics: every worker's registry gathered through the primary
 * and combined (counters summed, database-wide gauges by `max`), plus how many workers answered.
 */
async function serverMetrics(): Promise<string> {
  let gathered: Awaited<ReturnType<typeof clusterMetrics>>;
  try {
    gathered = await clusterMetrics(5000);
  } catch (err) {
    throw unavailable(
      'unavailable',
      `${(err as Error).message}; retry, or ask one worker with ?scope=worker`,
    );
  }
  const all = AggregatorRegistry.aggregate(gathered.parts);
  const workers = new Gauge({
    name: 'commitfeed_workers',
    help: 'Workers of this server (state="running") and how many answered this scrape (state="reporting")',
    labelNames: ['state'],
    registers: [all],
  });
  workers.set({ state: 'running' }, gathered.workers);
  workers.set({ state: 'reporting' }, gathered.parts.length);
  return all.metrics();
}

/** Registers `GET /metrics`. */
export function metricsRoutes(app: FastifyInstance, deps: MetricsDeps): void {
  const { registry, scrape, json } = buildRegistry(deps);
  // The last server built in a worker process answers the primary's collections (one per worker).
  serveClusterMetrics(json);
  const access = deps.config?.metricsRequireAdmin ? 'admin' : 'public';
  app.get<{ Querystring: { scope: 'server' | 'worker' } }>(
    '/metrics',
    {
      schema: {
        summary: 'Prometheus metrics',
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: {
            scope: {
              type: 'string',
              enum: ['server', 'worker'],
              default: 'server',
              description:
                'with WORKERS > 1: `server` combines every worker, `worker` is the one answering (see commitfeed_worker_info)',
            },
          },
        },
      },
      config: { access },
    },
    async (request, reply) => {
      reply.type(registry.contentType);
      if (request.query.scope === 'worker' || workerIndex() === undefined) return scrape();
      return serverMetrics();
    },
  );
}
