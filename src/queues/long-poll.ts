/**
 * The long-poll claim. A claim with `wait` tries once; if nothing is claimable it sleeps in-process
 * (Wakeups: no database connection held) until a wake-up meant for it (an enqueue wakes as many
 * claims as it has jobs), until something it knows of comes due, or until the wait ends, then tries
 * again with FOR UPDATE SKIP LOCKED. An enqueue of this process may instead hand it jobs directly
 * (hand-off.ts). On a paused queue it waits the same way (a resume wakes it, and it claims), and an
 * empty answer says whether the queue was paused at its last try: a worker told so knows that
 * nothing comes until someone resumes the queue, rather than that the queue is empty.
 *
 * Failure: a database error fails the claim; a waiting claim holds nothing that could leak, and a
 * woken claim that ends without claiming passes its wake-up on to another waiter.
 */
import type { Db } from '../db/database.ts';
import { type Cursor, compareCursors } from '../feed/cursor.ts';
import type { Feed } from '../feed/feed.ts';
import { type ClaimedJob, claimJobs, nextDue } from './claim.ts';
import type { QueueCounters } from './counters.ts';
import { unleaseJobs } from './settle.ts';
import { queueStream } from './wake-stream.ts';
import type { Wakeups } from './wakeups.ts';

export interface ClaimOptions {
  max: number;
  leaseSeconds: number;
  waitSeconds: number;
}

/** A claim's answer: the jobs, and whether the queue was paused at its last try (none were then). */
export interface ClaimOutcome {
  jobs: ClaimedJob[];
  paused: boolean;
}

/** What a claim uses of the Queues service. */
export interface ClaimParts {
  readonly db: Db;
  readonly feed: Feed;
  readonly wakeups: Wakeups;
  readonly counters: QueueCounters;
}

/** Shortest re-try when jobs are due but held by a concurrent claim; doubles up to the max. */
const RETRY_MIN_MS = 5;
const RETRY_MAX_MS = 1000;

/** Claims jobs, waiting up to `waitSeconds` for some to become available. */
export async function longPollClaim(
  q: ClaimParts,
  queue: string,
  opts: ClaimOptions,
  signal: AbortSignal,
): Promise<ClaimOutcome> {
  const started = performance.now();
  const deadline = Date.now() + opts.waitSeconds * 1000;
  const streams = [queueStream(queue)];
  const streamSet = new Set(streams);
  let retryMs = RETRY_MIN_MS;
  // Set while this claim holds a wake-up it has not used: if it ends before its next claim
  // statement, the wake-up goes to another waiter (it may be the only one woken for a job).
  let woken = false;
  let paused = false;
  try {
    for (;;) {
      const before = q.feed.tailer.position;
      const claimed = await claimJobs(q.db, queue, opts.max, opts.leaseSeconds);
      const { jobs, reaped, reapedDead, more } = claimed;
      woken = false;
      paused = claimed.paused;
      if (reaped > 0) {
        const c = q.counters.of(queue);
        c.leasesExpired += reaped;
        c.deadLettered += reapedDead;
      }
      if (jobs.length > 0) {
        // A full batch that left jobs behind: one more waiter takes over.
        if (jobs.length === opts.max && more) q.wakeups.wake(queue, 1);
        return delivered(q, queue, jobs, started);
      }
      // Released expired leases are claimable by the next statement.
      if (reaped > 0) continue;
      if (Date.now() >= deadline || signal.aborted || q.wakeups.closed) return empty(q, paused);
      const due = await nextDue(q.db, queue);
      // An enqueue that committed after `before` may have been missed by the claim's snapshot and
      // already passed the hub: look for its feed row before sleeping.
      if (await feedMovedSince(q.feed, streams, streamSet, before)) continue;
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
      const waited = await q.wakeups.wait(queue, opts.max, opts.leaseSeconds, until, signal, queueDue);
      if (waited.why === 'handed') {
        const jobs = waited.jobs!;
        if (signal.aborted) {
          // Its client left while the enqueue was committing: the jobs go back to the queue.
          await unlease(q, queue, jobs);
          return empty(q, false);
        }
        return delivered(q, queue, jobs, started);
      }
      woken = waited.why === 'woken';
      if (signal.aborted || q.wakeups.closed) return empty(q, paused);
    }
  } finally {
    if (woken) q.wakeups.wake(queue, opts.max);
  }
}

/** Gives jobs handed to a claim that can no longer take them back to the queue (ready, the attempt
 * not counted) and wakes a claim for them; if that fails, their leases run out as a crashed
 * worker's would. */
async function unlease(q: ClaimParts, queue: string, jobs: ClaimedJob[]): Promise<void> {
  try {
    const n = await unleaseJobs(q.db, queue, jobs);
    if (n > 0) {
      q.wakeups.wake(queue, n);
      q.feed.tailer.wake();
    }
  } catch {
    // The leases expire, and the jobs are claimable again then.
  }
}

/** A claim answers with jobs (claimed by its statement or handed off): counted, and waiting claims
 * learn when these leases could run out (a crashed worker). */
function delivered(q: ClaimParts, queue: string, jobs: ClaimedJob[], started: number): ClaimOutcome {
  q.counters.of(queue).claimed += jobs.length;
  q.counters.claimWait.observe((performance.now() - started) / 1000);
  q.wakeups.due(queue, Math.min(...jobs.map((j) => j.leaseExpiresAt)));
  return { jobs, paused: false };
}

function empty(q: ClaimParts, paused: boolean): ClaimOutcome {
  q.counters.emptyClaims++;
  return { jobs: [], paused };
}

/** True when the tailer has read a feed row of `streams` after `since`. */
async function feedMovedSince(
  feed: Feed,
  streams: string[],
  streamSet: Set<string>,
  since: Cursor,
): Promise<boolean> {
  let pos = since;
  for (;;) {
    const page = await feed.tailer.catchUp.read(streams, streamSet, pos, 1);
    if (page.events.length > 0) return true;
    pos = page.position;
    if (compareCursors(feed.tailer.position, pos) <= 0) return false;
  }
}
