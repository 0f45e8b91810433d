/**
 * Where long-poll claims wait, holding no database connection. A waiting claim sleeps on the hub
 * (released in-process when the tailer reads a `queue/<name>` feed row, i.e. at the commit of the
 * enqueue, retry, redrive or resume that wrote it) and on a timer set to the earliest moment the claim
 * knows something comes due: a delayed job, a retry backoff, a lease expiry. Claims granted in this
 * process pull earlier the timers of that queue's waiters (`due`), so a job whose worker crashed is
 * picked up as soon as its lease runs out.
 *
 * Lifecycle: one per Queues service. `close()` (at shutdown) releases every waiter at once, and later
 * waits return immediately. Failure: nothing here touches the database. A missed wake-up (a lease
 * granted by another process, a lost NOTIFY) costs latency up to the claim's `wait`, never a job: the
 * jobs table is the truth, and the next claim reads it.
 */
import type { Hub } from '../feed/hub.ts';
import { queueStream } from './wake-stream.ts';

interface Waiter {
  /** When the timer releases this waiter (epoch ms). */
  until: number;
  timer: NodeJS.Timeout | undefined;
  ctl: AbortController;
}

export class Wakeups {
  private readonly waiting = new Map<string, Set<Waiter>>();
  private closedFlag = false;

  constructor(private readonly hub: Hub) {}

  get closed(): boolean {
    return this.closedFlag;
  }

  /** Waiting claims, for metrics and tests. */
  get size(): number {
    let n = 0;
    for (const set of this.waiting.values()) n += set.size;
    return n;
  }

  /**
   * Resolves at the next wake-up of `queue` (a feed row, a `due` time reached), at `until` (epoch ms),
   * when `signal` aborts, or at close — whichever comes first. Registers synchronously: a feed row
   * read after this call returns is never missed.
   */
  async wait(queue: string, until: number, signal: AbortSignal): Promise<void> {
    if (this.closedFlag || signal.aborted) return;
    const ctl = new AbortController();
    const onAbort = () => ctl.abort();
    signal.addEventListener('abort', onAbort, { once: true });
    const w: Waiter = { until, timer: undefined, ctl };
    let set = this.waiting.get(queue);
    if (!set) {
      set = new Set();
      this.waiting.set(queue, set);
    }
    set.add(w);
    try {
      await this.hub.waitForEvents([queueStream(queue)], Math.max(0, until - Date.now()), ctl.signal);
    } finally {
      signal.removeEventListener('abort', onAbort);
      clearTimeout(w.timer);
      set.delete(w);
      if (set.size === 0 && this.waiting.get(queue) === set) this.waiting.delete(queue);
    }
  }

  /** Something in `queue` becomes claimable at `at` (epoch ms): waiters sleeping past it wake then. */
  due(queue: string, at: number): void {
    const set = this.waiting.get(queue);
    if (!set) return;
    for (const w of set) {
      if (at >= w.until) continue;
      w.until = at;
      clearTimeout(w.timer);
      w.timer = setTimeout(() => w.ctl.abort(), Math.max(0, at - Date.now()));
    }
  }

  /** Releases every waiter; later waits return at once. */
  close(): void {
    this.closedFlag = true;
    for (const set of this.waiting.values()) for (const w of set) w.ctl.abort();
  }
}
