/**
 * The queues service: what the routes call (no SQL in routes). It owns two group-commit batchers —
 * enqueues (job rows + one feed wake-up row per queue, one notifying transaction per group) and acks
 * (one update per group, notifying only when it releases an ordered group or a concurrency slot) —
 * and the long-poll claim loop.
 *
 * A claim with `wait` tries once; if nothing is claimable it sleeps in-process (Wakeups: no database
 * connection held) until a wake-up meant for it (an enqueue wakes as many claims as it has jobs), until
 * something it knows of comes due, or until the wait ends, then tries again with FOR UPDATE SKIP LOCKED.
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
import type { Database, Db } from '../db/database.ts';
import { type Cursor, compareCursors } from '../feed/cursor.ts';
import { Batcher } from '../commit/batcher.ts';
import type { Feed } from '../feed/feed.ts';
import {
  type CancelResult,
  type DeadJob,
  type JobStatus,
  type QueueStats,
  cancelJob,
  getJob,
  listDead,
  queueStats,
  retryDead,
  setConcurrency,
  setPaused,
} from './admin.ts';
import { type ClaimedJob, claimJobs, nextDue } from './claim.ts';
import { QueueCounters } from './counters.ts';
import {
  type CheckedJobInput,
  type EnqueueResult,
  type EnqueueOutcome,
  enqueueCheckedJobs,
} from './enqueue.ts';
import {
  type AckItem,
  type ExtendResult,
  type LeaseRef,
  type NackResult,
  type SettleResult,
  ackJobs,
  extendLease,
  nackJob,
  unleaseJobs,
} from './settle.ts';
import { queueStream } from './wake-stream.ts';
import { type Waiter, Wakeups } from './wakeups.ts';

export interface QueuesOptions {
  db: Kysely<Database>;
  feed: Feed;
  /** Most jobs in one enqueue transaction (a request is never split). */
  batchMaxJobs: number;
}

export interface ClaimOptions {
  max: number;
  leaseSeconds: number;
  waitSeconds: number;
}

/** Shortest re-try when jobs are due but held by a concurrent claim; doubles up to the max. */
const RETRY_MIN_MS = 5;
const RETRY_MAX_MS = 1000;

export class Queues {
  readonly enqueuer: Batcher<CheckedJobInput, EnqueueOutcome>;
  readonly acker: Batcher<AckItem, SettleResult>;
  readonly wakeups: Wakeups;
  readonly counters = new QueueCounters();
  private readonly db: Kysely<Database>;
  private readonly feed: Feed;

  constructor(opts: QueuesOptions) {
    this.db = opts.db;
    this.feed = opts.feed;
    this.wakeups = new Wakeups(opts.feed.hub);
    this.enqueuer = new Batcher(opts.db, {
      maxEvents: opts.batchMaxJobs,
      write: (db, jobs) => this.writeEnqueues(db, jobs),
      // Our own commit: read the feed now rather than waiting for the NOTIFY to come back.
      onCommit: () => this.feed.tailer.wake(),
    });
    // An ack that releases an ordered group or a concurrency slot writes a wake-up row.
    this.acker = new Batcher(opts.db, {
      maxEvents: 5000,
      write: ackJobs,
      onCommit: () => this.feed.tailer.wake(),
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
    return results;
  }

  /**
   * The enqueue group commit's write, with hand-off: a job due now, outside ordered groups, for a
   * queue on which claims of this process are waiting, is leased to the oldest of them by the
   * enqueue statement itself (commitfeed.enqueue_jobs_unchecked `leases`), and handed to it after
   * the commit, so the job reaches the worker without a claim statement (one statement, one commit
   * less between enqueue and handler). The statement leases only where a claim would hand out now
   * (not paused, no concurrency limit, not a duplicate); a reserved claim that got nothing claims
   * again at once, and one whose client has gone meanwhile gives its jobs back (`unlease`). If the
   * write fails, every reserved claim goes back to claiming; nothing was leased.
   */
  private async writeEnqueues(db: Db, jobs: readonly CheckedJobInput[]): Promise<EnqueueOutcome[]> {
    const leases: (number | null)[] = new Array(jobs.length).fill(null);
    const owner: (Waiter | undefined)[] = new Array(jobs.length);
    const reserved: Waiter[] = [];
    const eligible = new Map<string, number[]>();
    for (let i = 0; i < jobs.length; i++) {
      const j = jobs[i];
      if (j.group !== null || j.delay !== 0 || j.runAt !== null) continue;
      const list = eligible.get(j.queue);
      if (list) list.push(i);
      else eligible.set(j.queue, [i]);
    }
    for (const [queue, idx] of eligible) {
      let k = 0;
      for (const w of this.wakeups.reserve(queue, idx.length)) {
        reserved.push(w);
        for (let n = 0; n < w.max && k < idx.length; n++, k++) {
          leases[idx[k]] = w.leaseSeconds;
          owner[idx[k]] = w;
        }
      }
    }
    if (reserved.length === 0) return enqueueCheckedJobs(db, jobs);
    let results: EnqueueOutcome[];
    try {
      results = await enqueueCheckedJobs(db, jobs, leases);
    } catch (err) {
      for (const w of reserved) this.wakeups.release(w);
      throw err;
    }
    const handed = new Map<Waiter, ClaimedJob[]>();
    for (let i = 0; i < jobs.length; i++) {
      const h = results[i].handedOff;
      const w = owner[i];
      if (!h || !w) continue;
      const job: ClaimedJob = {
        id: results[i].id,
        payload: jobs[i].payload,
        attempt: 1,
        maxAttempts: jobs[i].maxAttempts,
        lease: h.lease,
        leaseExpiresAt: h.leaseExpiresAt,
      };
      const list = handed.get(w);
      if (list) list.push(job);
      else handed.set(w, [job]);
    }
    for (const w of reserved) {
      const got = handed.get(w);
      if (got) this.wakeups.handOff(w, got);
      else this.wakeups.release(w);
    }
    return results;
  }

  /** Claims jobs, waiting up to `waitSeconds` for some to become available. */
  async claim(queue: string, opts: ClaimOptions, signal: AbortSignal): Promise<ClaimedJob[]> {
    const started = performance.now();
    const deadline = Date.now() + opts.waitSeconds * 1000;
    const streams = [queueStream(queue)];
    const streamSet = new Set(streams);
    let retryMs = RETRY_MIN_MS;
    // Set while this claim holds a wake-up it has not used: if it ends before its next claim
    // statement, the wake-up goes to another waiter (it may be the only one woken for a job).
    let woken = false;
    try {
      for (;;) {
        const before = this.feed.tailer.position;
        const { jobs, reaped, reapedDead, more } = await claimJobs(
          this.db,
          queue,
          opts.max,
          opts.leaseSeconds,
        );
        woken = false;
        if (reaped > 0) {
          const c = this.counters.of(queue);
          c.leasesExpired += reaped;
          c.deadLettered += reapedDead;
        }
        if (jobs.length > 0) {
          // A full batch that left jobs behind: one more waiter takes over.
          if (jobs.length === opts.max && more) this.wakeups.wake(queue, 1);
          return this.delivered(queue, jobs, started);
        }
        // Released expired leases are claimable by the next statement.
        if (reaped > 0) continue;
        if (Date.now() >= deadline || signal.aborted || this.wakeups.closed) return this.empty();
        const due = await nextDue(this.db, queue);
        // An enqueue that committed after `before` may have been missed by the claim's snapshot and
        // already passed the hub: look for its feed row before sleeping.
        if (await this.feedMovedSince(streams, streamSet, before)) continue;
        // From here to the waiter's registration nothing awaits, so no wake-up can slip between.
        const now = Date.now();
        let until = deadline;
        let queueDue: number | undefined;
        if (due !== null) {
          if (due <= now + retryMs) {
            // Due already but held by a concurrent statement: this claim retries on its own timer.
            until = Math.min(until, now + retryMs);
            retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
          } else {
            // One queue-wide timer wakes one waiter then, however many wait.
            queueDue = due;
            retryMs = RETRY_MIN_MS;
          }
        }
        const waited = await this.wakeups.wait(queue, opts.max, opts.leaseSeconds, until, signal, queueDue);
        if (waited.why === 'handed') {
          const jobs = waited.jobs!;
          if (signal.aborted) {
            // Its client left while the enqueue was committing: the jobs go back to the queue.
            await this.unlease(queue, jobs);
            return this.empty();
          }
          return this.delivered(queue, jobs, started);
        }
        woken = waited.why === 'woken';
        if (signal.aborted || this.wakeups.closed) return this.empty();
      }
    } finally {
      if (woken) this.wakeups.wake(queue, opts.max);
    }
  }

  /** Gives jobs handed to a claim that can no longer take them back to the queue (ready, the attempt
   * not counted) and wakes a claim for them; if that fails, their leases run out as a crashed
   * worker's would. */
  private async unlease(queue: string, jobs: ClaimedJob[]): Promise<void> {
    try {
      const n = await unleaseJobs(this.db, queue, jobs);
      if (n > 0) {
        this.wakeups.wake(queue, n);
        this.feed.tailer.wake();
      }
    } catch {
      // The leases expire, and the jobs are claimable again then.
    }
  }

  /** A claim answers with jobs (claimed by its statement or handed off): counted, and waiting claims
   * learn when these leases could run out (a crashed worker). */
  private delivered(queue: string, jobs: ClaimedJob[], started: number): ClaimedJob[] {
    this.counters.of(queue).claimed += jobs.length;
    this.counters.claimWait.observe((performance.now() - started) / 1000);
    this.wakeups.due(queue, Math.min(...jobs.map((j) => j.leaseExpiresAt)));
    return jobs;
  }

  private empty(): ClaimedJob[] {
    this.counters.emptyClaims++;
    return [];
  }

  /** True when the tailer has read a feed row of `streams` after `since`. */
  private async feedMovedSince(streams: string[], streamSet: Set<string>, since: Cursor): Promise<boolean> {
    let pos = since;
    for (;;) {
      const page = await this.feed.tailer.read(streams, streamSet, pos, 1);
      if (page.events.length > 0) return true;
      pos = page.position;
      if (compareCursors(this.feed.tailer.position, pos) <= 0) return false;
    }
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

  extend(ref: LeaseRef, seconds: number): Promise<ExtendResult> {
    return extendLease(this.db, ref, seconds);
  }

  async stats(queue: string | null): Promise<QueueStats[]> {
    return queueStats(this.db, queue);
  }

  listDead(queue: string, after: string | null, limit: number): Promise<DeadJob[]> {
    return listDead(this.db, queue, after, limit);
  }

  async retryDead(queue: string, id: string | null): Promise<string[]> {
    const ids = await retryDead(this.db, queue, id);
    if (ids.length > 0) this.feed.tailer.wake();
    return ids;
  }

  async setPaused(queue: string, paused: boolean): Promise<void> {
    await setPaused(this.db, queue, paused);
    if (!paused) this.feed.tailer.wake();
  }

  getJob(queue: string, id: string): Promise<JobStatus | undefined> {
    return getJob(this.db, queue, id);
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
    await Promise.all([this.enqueuer.close(), this.acker.close()]);
  }

  /** Answers waiting claims now (they return no jobs); enqueues and acks still go through until close(). */
  releaseWaiters(): void {
    this.wakeups.close();
  }
}
