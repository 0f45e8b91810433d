/**
 * Publish → delivery lags of the events the tailer reads during one tick (commit-time row creation
 * to the tailer handing the event to subscribers): kept up to MAX_LAG_SAMPLES, then sampled evenly.
 */
const MAX_LAG_SAMPLES = 4096;

export class DeliveryLags {
  private lags: number[] = [];
  private seen = 0;

  add(lag: number): void {
    this.seen++;
    if (this.lags.length < MAX_LAG_SAMPLES) this.lags.push(lag);
    else {
      const i = Math.floor(Math.random() * this.seen);
      if (i < MAX_LAG_SAMPLES) this.lags[i] = lag;
    }
  }

  /** The tick's p50, p99 and max in ms (null: no event), and a fresh start for the next tick. */
  take(): { p50: number | null; p99: number | null; max: number | null } {
    const lags = this.lags.sort((x, y) => x - y);
    this.lags = [];
    this.seen = 0;
    if (lags.length === 0) return { p50: null, p99: null, max: null };
    return { p50: quantile(lags, 0.5), p99: quantile(lags, 0.99), max: lags[lags.length - 1] };
  }
}

function quantile(sorted: readonly number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}
