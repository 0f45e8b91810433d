/**
 * A cursor is a position in the whole feed: the pair (txid, id) of the last event read, written as
 * one opaque string `"<txid>-<id>"` in SSE `id:` fields and JSON `next`. The feed is totally ordered
 * by (txid, id); comparing cursors compares positions across all streams.
 *
 * Both parts fit in JavaScript numbers: txid is an xid8 (epoch << 32 | xid), exact below 2^53 for
 * two million wraparound epochs, and ids stay far below 2^53.
 */
import { NAME_PATTERN } from './names.ts';

export interface Cursor {
  readonly txid: number;
  readonly id: number;
}

/** Before every event. */
export const START: Cursor = Object.freeze({ txid: 0, id: 0 });

/**
 * A cursor, or an event id from a connection to several streams, which names the stream after the
 * cursor (`12-3/orders`, see frames.ts; the name is not needed to resume, as the cursor is a position
 * in the whole feed). The route schemas validate `after` with this pattern; parseCursor uses it too.
 */
export const CURSOR_PATTERN = `^(\\d{1,16})-(\\d{1,16})(?:/${NAME_PATTERN.slice(1, -1)})?$`;
const CURSOR_RE = new RegExp(CURSOR_PATTERN);

/** Parses a cursor string (or an event id that names its stream); undefined when it is malformed. */
export function parseCursor(text: string): Cursor | undefined {
  const m = CURSOR_RE.exec(text.trim());
  if (!m) return undefined;
  const txid = Number(m[1]);
  const id = Number(m[2]);
  if (!Number.isSafeInteger(txid) || !Number.isSafeInteger(id)) return undefined;
  return { txid, id };
}

export function formatCursor(c: Cursor): string {
  return `${c.txid}-${c.id}`;
}

/** Negative when a < b, 0 when equal, positive when a > b (commit order of the feed). */
export function compareCursors(a: Cursor, b: Cursor): number {
  return a.txid !== b.txid ? a.txid - b.txid : a.id - b.id;
}

export function maxCursor(a: Cursor, b: Cursor): Cursor {
  return compareCursors(a, b) >= 0 ? a : b;
}

/** The position just before any event of transaction `txid`: where a reader stands when every
 * transaction below the horizon `txid` has been read. */
export function horizonCursor(txid: number): Cursor {
  return { txid, id: 0 };
}
