/**
 * Where long-poll claims wait, holding no database connection, and whom each change of a queue wakes.
 *
 * Hand-off first: an enqueue of this process takes the oldest waiters out of the wait (`reserve`) and
 * its statement leases its jobs to them, so after the commit each gets its jobs (`handOff`) without
 * running a claim statement; a reserved waiter that got none claims again at once (`release`). What
 * follows is how waiters are woken for everything else (other replicas' enqueues, SQL enqueues, and
 * jobs that may not be handed off: delayed, grouped, paused or limited queues).
 *
 * A waiting claim costs nothing until a job exists for it: a feed row of `queue/<name>` (read by the
 * tailer at the commit of the enqueue, retry, redrive or resume that wrote it) wakes only as many
 * waiters, oldest first, as it needs — an enqueue of n jobs wakes waiters until their `max` adds up
 * to n; a retry, a dead letter, a cancel, a resume or a due moment wakes one; an ack that releases
 * ordered groups or concurrency slots (`released`, with a count) wakes that many. An enqueue committed by this process wakes at
 * once (`committed`), without waiting for the tailer to read its row. Waking every waiter made each run a
 * claim that found nothing, so latency grew with the number of waiters (measured: p50 17 → 55 ms and
 * 7 → 68 database transactions per job from 1 to 32 waiters). Nothing is stranded, because:
 * - a claim that fills its batch while its statement saw more ready jobs wakes one more waiter
 *   (`wake(queue, 1)`: there may be more jobs than a row said, e.g. released leases, or a resume);
 * - a woken claim that ends without claiming (its client left, its query failed) hands its wake-up
 *   on (`wake(queue, max)`);
 * - a claim that finds nothing looks at the feed it may have missed before it waits (Queues.claim),
 *   so only claims that are already waiting rely on this class;
 * - when something comes due without a feed row (a delayed job, a retry backoff, a lease running
 *   out), one queue-wide timer (`due`) wakes one waiter then, and the chain above does the rest.
 * Each replica wakes its own waiters for every row it reads, so across replicas more claims may wake
 * than there are jobs, never fewer.
 *
 * Lifecycle: one per Queues service. `close()` (at shutdown) releases every waiter at once, and later
 * waits return immediately. Failure: nothing here touches the database. A missed wake-up (a lost
 * NOTIFY) costs latency up to the claim's `wait`, never a job: the jobs table is the truth, and the
 * next claim reads it.
 */
import type { FeedEvent } from '../feed/event.ts';
import type { ClaimedJob } from './claim.ts';
import type { Hub } from '../feed/hub.ts';
import { queueStream } from './wake-stream.ts';

/** Why a wait ended. `woken`: this claim was handed a wake-up, which it must use or pass on.
 * `handed`: an enqueue of this process leased jobs to it directly (see `reserve`). */
export type WakeReason = 'woken' | 'timer' | 'aborted' | 'closed' | 'handed';

export interface WaitResult {
  why: WakeReason;
  /** With `handed`: the jobs, leased to this claim by the enqueue that committed them. */
  jobs?: ClaimedJob[];
}

/** A waiting claim. Reserved (`reserve`), it is out of its queue's set and waits for `handOff` or
 * `release`: its own timer, abort and close no longer end it. */
export interface Waiter {
  /** Jobs this claim takes at most: how much of a wake-up it absorbs. */
  readonly max: number;
  /** The claim's lease, in seconds: what a job handed to it is leased for. */
  readonly leaseSeconds: number;
  end: (why: WakeReason) => void;
  /** Ends the wait whatever its state (reserved or not). */
  settle: (r: WaitResult) => void;
}

interface QueueWaiters {
  /** In arrival order: the oldest waiter is woken first. */
  waiters: Set<Waiter>;
  unlisten: () => void;
  /** The queue-wide `due` timer and when it fires (epoch ms; Infinity: none). */
  dueAt: number;
  dueTimer: NodeJS.Timeout | undefined;
  /** Jobs already woken for by `committed()` whose own feed rows the tailer has not read yet. */
  credit: number;
}

export class Wakeups {
  private readonly queues = new Map<string, QueueWaiters>();
  private closedFlag = false;
  /** Waiters woken by a feed row, a hand-on or a `due` timer (not by their own timer). Metrics, tests. */
  woken = 0;
  /** Jobs an enqueue leased straight to a waiting claim (`handOff`). Metrics, tests. */
  handedOff = 0;

  constructor(private readonly hub: Hub) {}

  get closed(): boolean {
    return this.closedFlag;
  }

  /** Waiting claims, for metrics and tests. */
  get size(): number {
    let n = 0;
    for (const q of this.queues.values()) n += q.waiters.size;
    return n;
  }

  /**
   * Waits for a wake-up of `queue` until `until` (epoch ms), `signal` aborting, or close. Registers
   * synchronously: a feed row read after this call returns is never missed. A claim taking up to
   * `max` jobs absorbs that much of an enqueue's wake-up. `due` (epoch ms) is when this claim knows
   * something comes due (see `due()`).
   */
  wait(
    queue: string,
    max: number,
    leaseSeconds: number,
    until: number,
    signal: AbortSignal,
    due?: number,
  ): Promise<WaitResult> {
    if (this.closedFlag) return Promise.resolve({ why: 'closed' });
    if (signal.aborted) return Promise.resolve({ why: 'aborted' });
    const q = this.queueOf(queue);
    const waiting = new Promise<WaitResult>((resolve) => {
      const onAbort = () => w.end('aborted');
      const timer = setTimeout(() => w.end('timer'), Math.max(0, until - Date.now()));
      const w: Waiter = {
        max,
        leaseSeconds,
        end: (why) => {
          if (!q.waiters.delete(w)) return;
          if (q.waiters.size === 0) this.drop(queue, q);
          w.settle({ why });
        },
        settle: (r) => {
          clearTimeout(timer);
          signal.removeEventListener('abort', onAbort);
          resolve(r);
        },
      };
      q.waiters.add(w);
      signal.addEventListener('abort', onAbort, { once: true });
    });
    if (due !== undefined) this.due(queue, due);
    return waiting;
  }

  /**
   * Wakes waiters of `queue`, oldest first, until their `max` adds up to `jobs` (every waiter for
   * Infinity). Returns how many it woke.
   */
  wake(queue: string, jobs: number): number {
    const q = this.queues.get(queue);
    if (!q) return 0;
    let woke = 0;
    let covered = 0;
    for (const w of q.waiters) {
      if (covered >= jobs) break;
      covered += w.max;
      woke++;
      w.end('woken');
    }
    this.woken += woke;
    return woke;
  }

  /**
   * This process just committed `jobs` claimable jobs to `queue`: wake for them now rather than when
   * the tailer reads their feed row (one query later). The row, when read, wakes nobody for the jobs
   * counted here (another replica's row read meanwhile may be absorbed instead: its jobs then wait
   * for this row, which is committed and on its way, so nothing is stranded).
   */
  committed(queue: string, jobs: number): void {
    const q = this.queues.get(queue);
    if (!q || jobs <= 0) return;
    q.credit += jobs;
    this.wake(queue, jobs);
  }

  /**
   * Takes waiters of `queue` out of the wait, oldest first, until their `max` covers `jobs`, for an
   * enqueue of this process to lease jobs to them directly (hand-off: the job reaches the claim
   * without a claim statement after the commit). Each must then get `handOff` or `release`.
   */
  reserve(queue: string, jobs: number): Waiter[] {
    const q = this.queues.get(queue);
    if (!q || jobs <= 0) return [];
    const taken: Waiter[] = [];
    let covered = 0;
    for (const w of q.waiters) {
      if (covered >= jobs) break;
      covered += w.max;
      taken.push(w);
    }
    for (const w of taken) q.waiters.delete(w);
    if (q.waiters.size === 0) this.drop(queue, q);
    return taken;
  }

  /** Ends a reserved waiter's wait with the jobs leased to it. */
  handOff(w: Waiter, jobs: ClaimedJob[]): void {
    this.handedOff += jobs.length;
    w.settle({ why: 'handed', jobs });
  }

  /** Ends a reserved waiter's wait without jobs: it claims again at once (`woken`). */
  release(w: Waiter): void {
    w.settle({ why: 'woken' });
  }

  /** Something in `queue` becomes claimable at `at` (epoch ms) with no feed row to say so: one
   * waiter wakes then (if any is waiting). */
  due(queue: string, at: number): void {
    const q = this.queues.get(queue);
    if (!q || at >= q.dueAt) return;
    clearTimeout(q.dueTimer);
    q.dueAt = at;
    q.dueTimer = setTimeout(
      () => {
        q.dueAt = Number.POSITIVE_INFINITY;
        q.dueTimer = undefined;
        this.wake(queue, 1);
      },
      Math.max(0, at - Date.now()),
    );
  }

  /** Releases every waiter; later waits return at once. */
  close(): void {
    this.closedFlag = true;
    // Reserved waiters are not in these sets: the enqueue holding them ends their wait.
    for (const q of [...this.queues.values()]) for (const w of [...q.waiters]) w.end('closed');
  }

  private queueOf(queue: string): QueueWaiters {
    let q = this.queues.get(queue);
    if (!q) {
      q = {
        waiters: new Set(),
        unlisten: this.hub.listen(queueStream(queue), (e) => this.onRow(queue, e)),
        dueAt: Number.POSITIVE_INFINITY,
        dueTimer: undefined,
        credit: 0,
      };
      this.queues.set(queue, q);
    }
    return q;
  }

  private drop(queue: string, q: QueueWaiters): void {
    q.unlisten();
    clearTimeout(q.dueTimer);
    if (this.queues.get(queue) === q) this.queues.delete(queue);
  }

  /** A feed row of the queue's wake-up stream (see wake-stream.ts for what each type carries). */
  private onRow(queue: string, e: FeedEvent): void {
    let jobs = jobsWoken(e);
    const q = this.queues.get(queue);
    if (q && q.credit > 0 && e.type === 'enqueued') {
      const used = Math.min(q.credit, jobs);
      q.credit -= used;
      jobs -= used;
    }
    if (jobs > 0) this.wake(queue, jobs);
  }
}

/** How many jobs a wake-up row may have made claimable (a lower bound is enough: see the header). */
export function jobsWoken(e: { type: string | null; data: string }): number {
  switch (e.type) {
    case 'enqueued': {
      const m = /"jobs":(\d+)/.exec(e.data);
      return m ? Number(m[1]) : 1;
    }
    // A dead job lets the next job of its ordered group go, if it had one: wake one to look.
    default:
      return 1;
  }
}
