/**
 * When the next attempt may go: the retry schedule with jitter, and a per-endpoint rate limit.
 */

/**
 * The wait before attempt `next` (1-based: attempt 2 is the first retry), from the schedule (the
 * wait before each attempt; the last repeats), with up to 20% jitter taken off, so retries of many
 * deliveries failed together spread out. Seconds.
 */
export function retryDelaySeconds(scheduleMs: readonly number[], next: number, random = Math.random): number {
  const base = scheduleMs[Math.min(next - 1, scheduleMs.length - 1)] ?? 0;
  return (base * (1 - 0.2 * random())) / 1000;
}

/**
 * A token bucket: `perSecond` deliveries a second on average, bursts of up to one second's worth.
 * `take()` resolves when a token is there (or at once without a limit); `signal` ends the wait early.
 */
export class RateLimiter {
  private tokens: number;
  private at = performance.now();

  constructor(private perSecond: number | null) {
    this.tokens = Math.max(1, perSecond ?? 1);
  }

  setRate(perSecond: number | null): void {
    this.perSecond = perSecond;
  }

  async take(signal: AbortSignal): Promise<void> {
    for (;;) {
      const rate = this.perSecond;
      if (rate === null) return;
      const now = performance.now();
      const burst = Math.max(1, rate);
      this.tokens = Math.min(burst, this.tokens + ((now - this.at) / 1000) * rate);
      this.at = now;
      if (this.tokens >= 1) {
        this.tokens -= 1;
        return;
      }
      if (signal.aborted) return;
      const waitMs = ((1 - this.tokens) / rate) * 1000;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, waitMs);
        function done() {
          clearTimeout(timer);
          signal.removeEventListener('abort', done);
          resolve();
        }
        signal.addEventListener('abort', done, { once: true });
      });
    }
  }
}
