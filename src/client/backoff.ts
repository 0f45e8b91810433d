/** Waiting between attempts: shared by a `Subscription`'s reconnects and a worker's failed claims. */

export interface BackoffOptions {
  /** First retry delay in ms (the server's `retry:` hint wins when larger). Default 250. */
  initialMs?: number;
  /** Longest delay in ms. Default 30000. */
  maxMs?: number;
}

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

/** Exponential backoff with ±20% jitter, so clients reconnecting after one restart spread out. */
export function backoffDelay(attempt: number, floorMs: number, opts: BackoffOptions | undefined): number {
  const initial = Math.max(opts?.initialMs ?? 250, floorMs);
  const max = Math.max(opts?.maxMs ?? 30_000, initial);
  const base = Math.min(max, initial * 2 ** Math.max(0, attempt - 1));
  return Math.round(base * (0.8 + Math.random() * 0.4));
}
