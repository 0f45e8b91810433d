/** Waiting between attempts: shared by a `Subscription`'s reconnects and a worker's failed claims. */

export interface BackoffOptions {
  /** First retry delay in ms (the server's `retry:` hint wins when larger). Default 250. */
  initialMs?: number;
  /** Longest delay in ms (the server's hint wins when larger). Default 3000 (BACKOFF_MAX_MS). */
  maxMs?: number;
}

/**
 * The default longest wait. A few seconds, not tens: the waits double through an outage, and a cap
 * of 30 s had a subscriber come back ~16 s after a short database restart had ended. Every client
 * of a restarted server still asks at most about once per cap, spread by the jitter.
 */
export const BACKOFF_MAX_MS = 3000;

/** Resolves after `ms`, or at once when `signal` aborts (never rejects). */
export const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });

/**
 * The wait before attempt `attempt` (1: the first retry): doubling from `initialMs` up to `maxMs`,
 * each drawn between 80% and 100% of that, so clients reconnecting after one restart spread out
 * without any waiting past the cap; never shorter than `floorMs` (the server's `retry:` or
 * Retry-After).
 */
export function backoffDelay(attempt: number, floorMs: number, opts: BackoffOptions | undefined): number {
  const initial = Math.max(opts?.initialMs ?? 250, floorMs);
  const max = Math.max(opts?.maxMs ?? BACKOFF_MAX_MS, initial);
  const base = Math.min(max, initial * 2 ** Math.max(0, attempt - 1));
  return Math.max(floorMs, Math.round(base * (0.8 + Math.random() * 0.2)));
}
