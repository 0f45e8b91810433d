/**
 * The queues service: the operations that change this process's state, which the routes call (no
 * SQL in routes). It owns two group-commit batchers — enqueues (job rows + one feed wake-up row per
 * queue, one notifying transaction per group; hand-off.ts leases jobs straight to waiting claims) and
 * acks (one update per group, notifying only when it releases an ordered group or a concurrency
 * slot) — the long-poll claims (long-poll.ts, waiting in `wakeups`), and the counts. An operation
 * that is one statement and changes none of that (extend, stats, dead letters, a job's status) is
 * called by its route with the database, without a method here.
 *
 * Lifecycle: created by the server beside the Feed (src/server.ts) and handed to the routes and
 * /metrics; `close()` (at shutdown, before the feed stops) releases waiting claims (they answer `{"jobs":[]}`) and waits for queued enqueues and acks to be written.
 * Counts of what it did (`counters`, plain fields read by /metrics at scrape time) are kept as it
 * goes: enqueued, claimed, acked, nacked, leases expired, dead-lettered, cancelled, claim waits.
 *
 * Failure: a database error fails the requests it touches (503 when the database is unavailable); a
 * waiting claim holds nothing that could leak, and a failed retry/redrive/resume notify costs latency
 * only (claimers re-read the table on their next try).
 */
import type { Kysely } from 'kysely';
import { Batcher } from '../commit/batcher.ts';
import { analyzeChanged } from '../retention/partitions.ts';
import type { Database } from '../db/database.ts';
import type { Feed } from '../feed/feed.ts';
import { type CancelResult, cancelJob, retryDead, setConcurrency, setPaused } from './admin.ts';
import { QueueCounters } from './counters.ts';
import type { CheckedJobInput, EnqueueOutcome, EnqueueResult } from './enqueue.ts';
import { enqueueHandingOff } from './hand-off.ts';
import { type ClaimOptions, type ClaimOutcome, longPollClaim } from './long-poll.ts';
import {
  type AckItem,
  type LeaseRef,
  type NackResult,
  type SettleResult,
  ackJobsWaking,
  nackJob,
} from './settle.ts';
import { Wakeups } from './wakeups.ts';

export interface QueuesOptions {
  db: Kysely<Database>;
  feed: Feed;
  /** Most jobs in one enqueue transaction (a request is never split). */
  batchMaxJobs: number;
}

/** Jobs this process enqueues between two statistics checks (see `grown`). */
const STATS_CHECK_JOBS = 256;
/** At most one statistics check a second: at 40,000 jobs/s, 256 jobs would be a check in flight at all times. */
const STATS_CHECK_MIN_MS = 1000;

export class Queues {
  readonly enqueuer: Batcher<CheckedJobInput, EnqueueOutcome>;
  readonly acker: Batcher<AckItem, SettleResult>;
  readonly wakeups: Wakeups;
  readonly counters = new QueueCounters();
  readonly db: Kysely<Database>;
  readonly feed: Feed;
  private enqueuedSinceCheck = 0;
  private lastStatsCheckAt = 0;
  private statsCheck: Promise<void> | undefined;

  constructor(opts: QueuesOptions) {
    this.db = opts.db;
    this.feed = opts.feed;
    this.wakeups = new Wakeups(opts.feed.hub);
    this.enqueuer = new Batcher(opts.db, {
      maxEvents: opts.batchMaxJobs,
      write: (db, jobs) => enqueueHandingOff(db, jobs, this.wakeups),
      // Our own commit: read the feed now rather than waiting for the NOTIFY to come back — if it
      // wrote a wake-up row: a group whose jobs were all handed off or duplicates wrote none, and a
      // read for nothing costs a statement per enqueue.
      onCommit: (results) => {
        if (results.some((r) => !r.duplicate && !r.handedOff)) this.feed.tailer.wake();
      },
    });
    // Only an ack that releases an ordered group or a concurrency slot writes a wake-up row, and
    // only then is there something for the tailer to read (most acks: no row, no read).
    this.acker = new Batcher(opts.db, {
      maxEvents: 5000,
      write: async (db, items) => {
        const { results, woke } = await ackJobsWaking(db, items);
        if (woke) this.feed.tailer.wake();
        return results;
      },
    });
  }

  /** Enqueues one request's jobs (all-or-nothing), grouped with concurrent enqueues. */
  async enqueue(jobs: readonly CheckedJobInput[]): Promise<EnqueueResult[]> {
    const results = await this.enqueuer.publish(jobs);
    const now = new Map<string, number>();
    for (let i = 0; i < jobs.length; i++) {
      if (results[i].duplicate) continue;
      this.counters.of(jobs[i].queue).enqueued++;
      // A job handed to a waiting claim wakes nobody else.
      if (jobs[i].delay === 0 && jobs[i].runAt === null && !results[i].handedOff)
        now.set(jobs[i].queue, (now.get(jobs[i].queue) ?? 0) + 1);
    }
    for (const [queue, n] of now) this.wakeups.committed(queue, n);
    this.grown(jobs.length);
    return results;
  }

  /**
   * A jobs table swings between empty and large, and the statistics of an emptied (vacuumed) one
   * say "no rows" whatever it holds later; the claim, ack and enqueue statements are prepared, and
   * their plans, made against those statistics (sequential scans, nested loops over them), are kept
   * until the statistics change. Measured: 5–30 ms of PostgreSQL CPU per job, where 1 ms is normal,
   * at 200 jobs/s into a queue refilled after a vacuum (bench/HISTORY.md, "Queues: where a job's
   * time goes"). So every STATS_CHECK_JOBS jobs enqueued here, the tables that doubled since their
   * last ANALYZE are analysed (the janitor's 10-second check, without waiting for it, and where the
   * janitor is off); new statistics make every connection plan its statements again. One check at a
   * time, at most one a second (STATS_CHECK_MIN_MS); a failed one is ignored (the next comes
   * STATS_CHECK_JOBS jobs later).
   */
  private grown(jobs: number): void {
    this.enqueuedSinceCheck += jobs;
    if (this.enqueuedSinceCheck < STATS_CHECK_JOBS || this.statsCheck) return;
    const now = performance.now();
    if (now - this.lastStatsCheckAt < STATS_CHECK_MIN_MS) return;
    this.lastStatsCheckAt = now;
    this.enqueuedSinceCheck = 0;
    this.statsCheck = analyzeChanged(this.db, 1000, 'doubled').then(
      () => {
        this.statsCheck = undefined;
      },
      () => {
        this.statsCheck = undefined;
      },
    );
  }

  /** Claims jobs, waiting up to `waitSeconds` for some to become available (long-poll.ts). */
  claim(queue: string, opts: ClaimOptions, signal: AbortSignal): Promise<ClaimOutcome> {
    return longPollClaim(this, queue, opts, signal);
  }

  /** Acks jobs (each item independently), grouped with concurrent acks into one statement. */
  async ack(items: readonly AckItem[]): Promise<SettleResult[]> {
    const results = await this.acker.publish(items);
    for (let i = 0; i < items.length; i++) if (results[i].ok) this.counters.of(items[i].queue).acked++;
    return results;
  }

  async nack(ref: LeaseRef, error: string | null, delaySeconds: number | null): Promise<NackResult> {
    const res = await nackJob(this.db, ref, error, delaySeconds);
    if (res.ok) {
      const c = this.counters.of(ref.queue);
      if (res.state === 'dead') {
        c.nackedDead++;
        c.deadLettered++;
      } else {
        c.nackedRetry++;
      }
      this.feed.tailer.wake();
    }
    return res;
  }

  async retryDead(queue: string, id: string | null): Promise<string[]> {
    const ids = await retryDead(this.db, queue, id);
    if (ids.length > 0) this.feed.tailer.wake();
    return ids;
  }

  /** False when there is no such queue (nothing was changed). */
  async setPaused(queue: string, paused: boolean): Promise<boolean> {
    const found = await setPaused(this.db, queue, paused);
    if (found && !paused) this.feed.tailer.wake();
    return found;
  }

  async cancel(queue: string, id: string): Promise<CancelResult> {
    const res = await cancelJob(this.db, queue, id);
    if (res.ok) {
      this.counters.of(queue).cancelled++;
      this.feed.tailer.wake();
    }
    return res;
  }

  async setConcurrency(queue: string, limit: number | null): Promise<void> {
    await setConcurrency(this.db, queue, limit);
    this.feed.tailer.wake();
  }

  /** Releases waiting claims and finishes queued enqueues and acks. */
  async close(): Promise<void> {
    this.releaseWaiters();
    await Promise.all([this.enqueuer.close(), this.acker.close(), this.statsCheck]);
  }

  /** Answers waiting claims now (they return no jobs); enqueues and acks still go through until close(). */
  releaseWaiters(): void {
    this.wakeups.close();
  }
}
