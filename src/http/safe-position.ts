/**
 * The 503 side of Tailer.safePosition for routes: a read that needs a position after every
 * acknowledged write gets one, or a 503 with Retry-After, never a start in the past.
 */
import { unavailable } from '../errors.ts';
import type { Cursor } from '../feed/cursor.ts';
import type { Feed } from '../feed/feed.ts';

/**
 * A position after every write acknowledged so far and not past the horizon (Tailer.safePosition):
 * the start of `latest` and the reach of a read-your-writes read. When an open transaction holds the
 * horizon behind committed rows for longer than START_WAIT, 503: any start would be in the past
 * (replaying acknowledged events) or past the horizon (missing the open transaction's events).
 */
export async function safePosition(feed: Feed, waitMs: number): Promise<Cursor> {
  const p = await feed.tailer.safePosition(waitMs);
  if (p === undefined) {
    throw unavailable(
      'unavailable',
      'committed events are waiting behind a transaction that is still open (the feed horizon); retry shortly',
    );
  }
  return p;
}
