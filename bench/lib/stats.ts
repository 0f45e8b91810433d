// Latency samples and their summary. Samples are kept whole (a few million doubles at most per
// run) so percentiles are exact rather than bucketed.

export interface Summary {
  count: number;
  mean: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

export class Recorder {
  private buf = new Float64Array(1024);
  private n = 0;

  add(value: number): void {
    if (this.n === this.buf.length) {
      const next = new Float64Array(this.buf.length * 2);
      next.set(this.buf);
      this.buf = next;
    }
    this.buf[this.n++] = value;
  }

  get count(): number {
    return this.n;
  }

  summary(): Summary {
    return summarize(this.buf.subarray(0, this.n));
  }
}

export function summarize(values: Float64Array | number[]): Summary {
  const sorted = Float64Array.from(values).sort();
  const n = sorted.length;
  if (n === 0)
    return { count: 0, mean: Number.NaN, p50: Number.NaN, p90: Number.NaN, p99: Number.NaN, max: Number.NaN };
  let sum = 0;
  for (const v of sorted) sum += v;
  const at = (q: number) => sorted[Math.min(n - 1, Math.max(0, Math.ceil(q * n) - 1))];
  return { count: n, mean: sum / n, p50: at(0.5), p90: at(0.9), p99: at(0.99), max: sorted[n - 1] };
}

/** Milliseconds on CLOCK_MONOTONIC: the same clock in every process on this machine, so a
 * publisher can stamp it into a payload and a subscriber in another process can subtract. */
export function monoMs(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}
