/**
 * The one bound on timer delays. Node's setTimeout fires at once for a delay above 2^31 - 1 ms
 * (~24.8 days), so every long wait (token expiry, a due time) is clamped to it and re-armed; the
 * duration settings are capped a little below it (config/) so PostgreSQL's statement_timeout, which
 * has the same limit, takes them too.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** A delay setTimeout keeps: `ms` clamped to [0, MAX_TIMER_MS]. */
export function timerDelay(ms: number): number {
  return Math.max(0, Math.min(ms, MAX_TIMER_MS));
}
