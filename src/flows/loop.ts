/**
 * The background loop the follower and the scheduler share: passes run one at a time until `stop()`,
 * with a sleep between them that `wake()` cuts short.
 *
 * Lifecycle: `start()` begins the loop (again after a `stop()`; a second start while it runs does
 * nothing). `stop()` lets the pass in progress end (its owner may end it early: see `stopping`) and
 * resolves when the loop has returned; no pass begins after it.
 * Failure: a pass that throws is handed to `onError` (the owner logs and counts it) and the next one
 * runs after a backoff that doubles from `intervalMs` up to `maxBackoffMs` (equal values: a fixed
 * wait) and returns to `intervalMs` after a pass that succeeds.
 */

export interface LoopOptions {
  /** One pass. Returns how long to sleep before the next (ms), or null to run the next at once. */
  pass: () => Promise<number | null>;
  onError: (err: Error) => void;
  /** First wait after a failed pass. */
  intervalMs: number;
  /** Longest wait after failed passes in a row. */
  maxBackoffMs: number;
}

export class Loop {
  private stopped = true;
  private loop: Promise<void> | undefined;
  private sleeping: { timer: NodeJS.Timeout; done: () => void } | undefined;

  constructor(private readonly opts: LoopOptions) {}

  /** True once `stop()` was called on a loop that had started: a long pass should end early. */
  get stopping(): boolean {
    return this.stopped && this.loop !== undefined;
  }

  get running(): boolean {
    return !this.stopped;
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.loop = this.run();
  }

  /** Ends the current sleep: the next pass runs now (a pass in progress is not repeated). */
  wake(): void {
    const s = this.sleeping;
    if (s) {
      clearTimeout(s.timer);
      s.done();
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.wake();
    await this.loop;
  }

  private async run(): Promise<void> {
    let backoff = this.opts.intervalMs;
    while (!this.stopped) {
      let wait: number | null;
      try {
        wait = await this.opts.pass();
        backoff = this.opts.intervalMs;
      } catch (err) {
        this.opts.onError(err as Error);
        wait = backoff;
        backoff = Math.min(backoff * 2, this.opts.maxBackoffMs);
      }
      if (wait === null || this.stopped) continue;
      await new Promise<void>((resolve) => {
        const done = () => {
          this.sleeping = undefined;
          resolve();
        };
        this.sleeping = { timer: setTimeout(done, wait), done };
      });
    }
  }
}
