/**
 * The queues' metrics: depth by queue and state from the tables (every instance sees the same; one
 * grouped read of the jobs table per scrape serves the depth gauges, which are left without
 * samples when it fails), and this process's activity from its own counters.
 */
import type { Db } from '../db/database.ts';
import type { Measured, Metrics } from '../metrics.ts';
import { queueStats } from './admin.ts';
import type { QueueCounts } from './counters.ts';
import type { Queues } from './queues.ts';

export function queueMetrics(db: Db, queues: Queues): Measured {
  return {
    registerMetrics(m) {
      registerDepthMetrics(m, db);
      registerActivityMetrics(m, queues);
    },
  };
}

function registerDepthMetrics(m: Metrics, db: Db): void {
  const depth = m.perScrape(() => queueStats(db, null));
  m.gauge(
    'commitfeed_queues',
    'Queues in the database (-1 if the database cannot be read)',
    async () => {
      const all = await depth();
      return all ? all.length : -1;
    },
    'max',
  );
  m.gauges(
    'commitfeed_queue_jobs',
    'Jobs by queue and state: ready (claimable now), delayed (waiting for their run time), leased (held by a live lease), dead (dead-lettered)',
    ['queue', 'state'],
    async (set) => {
      for (const q of (await depth()) ?? []) {
        set({ queue: q.name, state: 'ready' }, q.ready);
        set({ queue: q.name, state: 'delayed' }, q.delayed);
        set({ queue: q.name, state: 'leased' }, q.leased);
        set({ queue: q.name, state: 'dead' }, q.dead);
      }
    },
    'max',
  );
  m.gauges(
    'commitfeed_queue_oldest_ready_age_seconds',
    'Seconds the oldest claimable job of each queue has waited (0 when none)',
    ['queue'],
    async (set) => {
      for (const q of (await depth()) ?? []) set({ queue: q.name }, q.oldestReadyAgeSeconds);
    },
    'max',
  );
}

function registerActivityMetrics(m: Metrics, queues: Queues): void {
  const counts = queues.counters;
  // A per-queue counter copied from the queues' own counts at scrape time.
  const byQueue = (name: string, help: string, read: (c: QueueCounts) => number) =>
    m.counters(name, help, ['queue'], (add) => {
      for (const [queue, c] of counts.byQueue) add({ queue }, read(c));
    });
  byQueue(
    'commitfeed_queue_jobs_enqueued_total',
    'Jobs enqueued through this process (a duplicate of an existing key not counted)',
    (c) => c.enqueued,
  );
  byQueue('commitfeed_queue_jobs_claimed_total', 'Jobs handed out by claims', (c) => c.claimed);
  byQueue('commitfeed_queue_acks_total', 'Jobs completed by an ack holding their live lease', (c) => c.acked);
  m.counters(
    'commitfeed_queue_nacks_total',
    'Nacked jobs by outcome: retry (scheduled again after a backoff) or dead (attempts used up)',
    ['queue', 'outcome'],
    (add) => {
      for (const [queue, c] of counts.byQueue) {
        add({ queue, outcome: 'retry' }, c.nackedRetry);
        add({ queue, outcome: 'dead' }, c.nackedDead);
      }
    },
  );
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
  m.counter(
    'commitfeed_queue_claim_wakeups_total',
    'Waiting claims woken to look for jobs (by an enqueue, retry, release or due time; at most one per job they can take)',
    () => queues.wakeups.woken,
  );
  m.counter(
    'commitfeed_queue_jobs_handed_off_total',
    'Jobs an enqueue leased straight to a claim of this process waiting for them (no claim statement)',
    () => queues.wakeups.handedOff,
  );
  m.counter(
    'commitfeed_queue_claims_empty_total',
    'Claims that answered without jobs (the wait ran out, the client left, or shutdown)',
    () => counts.emptyClaims,
  );
  m.gauge(
    'commitfeed_queue_claims_waiting',
    'Long-poll claims waiting in this process',
    () => queues.wakeups.size,
  );
  m.histogram(
    'commitfeed_queue_claim_wait_seconds',
    'Time from a claim request to its answer, for claims that returned jobs (long-polls included)',
    () => counts.claimWait,
  );
}
