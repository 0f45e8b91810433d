/**
 * Where a read starts, as every route that reads the feed takes it: the cursor a request names
 * (givenCursor) and, when it names none and wants `latest`, a position after every write
 * acknowledged so far (safePosition).
 */
import type { FastifyRequest } from 'fastify';
import { ApiError, unavailable } from '../errors.ts';
import { type Cursor, type GivenCursor, parseCursor } from '../feed/cursor.ts';
import type { Feed } from '../feed/feed.ts';

/**
 * The cursor a request names: its Last-Event-ID header (what EventSource sends on reconnect), else
 * `after`; undefined when it names none. A malformed one is a 400 `invalid_cursor`.
 */
export function givenCursor(request: FastifyRequest, after: string | undefined): GivenCursor | undefined {
  const header = request.headers['last-event-id'];
  const given = typeof header === 'string' && header !== '' ? header : after;
  if (given === undefined) return undefined;
  const c = parseCursor(given);
  if (!c) {
    throw new ApiError(
      400,
      'invalid_cursor',
      `malformed cursor ${JSON.stringify(given.slice(0, 80))}: expected "<txid>-<id>.<tag>" as sent in an event id`,
    );
  }
  return c;
}

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
