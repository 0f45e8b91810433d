/**
 * A cursor is a position in the whole feed: the pair (txid, id) of the last event read, written as
 * one opaque string `"<txid>-<id>.<tag>"` in SSE `id:` fields and JSON `next`. The feed is totally
 * ordered by (txid, id); comparing cursors compares positions across all streams.
 *
 * The tag names the feed that minted the cursor: a few characters derived from the feed's epoch, a
 * random value created with the schema (migrations/0006_feed_epoch.ts). A cursor from another feed
 * (another database or server, or this one dropped and recreated) carries another tag and is
 * refused instead of being read as a position here (see history.ts). The tag is optional on input:
 * cursors minted before it existed (`"<txid>-<id>"`) are still accepted, checked by position only.
 *
 * Both parts fit in JavaScript numbers: txid is an xid8 (epoch << 32 | xid), exact below 2^53 for
 * two million wraparound epochs, and ids stay far below 2^53.
 *
 * This file is the one place that parses and formats cursor text; everything else treats it as
 * opaque (SQL that writes cursor text takes the tag as an argument, frames.ts, or from
 * commitfeed.cursor_suffix(), src/sql/cursor-suffix.sql, which derives it as epochTag does).
 */
import { NAME_PATTERN } from './names.ts';

export interface Cursor {
  readonly txid: number;
  readonly id: number;
}

/** A cursor as a client gave it: `tag` when it carried one. */
export interface GivenCursor extends Cursor {
  readonly tag?: string;
}

/** Before every event. */
export const START: Cursor = Object.freeze({ txid: 0, id: 0 });

/** A feed's tag: 8 lowercase hexadecimal digits. */
const TAG_PATTERN = '[0-9a-f]{8}';

/**
 * A cursor, or an event id from a connection to several streams, which names the stream after the
 * cursor (`12-3.9f86d081/orders`, see frames.ts; the name is not needed to resume, as the cursor is a
 * position in the whole feed). The route schemas validate `after` with this pattern; parseCursor
 * uses it too.
 */
export const CURSOR_PATTERN = `^(\\d{1,16})-(\\d{1,16})(?:\\.(${TAG_PATTERN}))?(?:/${NAME_PATTERN.slice(1, -1)})?$`;
const CURSOR_RE = new RegExp(CURSOR_PATTERN);

/** Parses a cursor string (or an event id that names its stream); undefined when it is malformed. */
export function parseCursor(text: string): GivenCursor | undefined {
  const m = CURSOR_RE.exec(text.trim());
  if (!m) return undefined;
  const txid = Number(m[1]);
  const id = Number(m[2]);
  if (!Number.isSafeInteger(txid) || !Number.isSafeInteger(id)) return undefined;
  return m[3] === undefined ? { txid, id } : { txid, id, tag: m[3] };
}

/** The text of a cursor; with a feed's `tag`, the tagged form every answer carries. */
export function formatCursor(c: Cursor, tag?: string): string {
  return `${c.txid}-${c.id}${tagSuffix(tag)}`;
}

/** The text of the position (`tx`, `id`) (their decimal texts) followed by `suffix` (tagSuffix). */
export function cursorText(tx: string, id: string, suffix: string): string {
  return `${tx}-${id}${suffix}`;
}

/** What follows `<txid>-<id>` in a cursor of the feed tagged `tag` ('' for none). SQL that builds
 * cursor text appends it as an argument. */
export function tagSuffix(tag: string | undefined): string {
  return tag === undefined || tag === '' ? '' : `.${tag}`;
}

/** Adds a feed's tag to untagged cursor text (the group commit's SQL functions return it so, as does
 * a stream subscription's stored cursor). */
export function tagCursorText(untagged: string, tag: string): string {
  return `${untagged}${tagSuffix(tag)}`;
}

/** The tag of a feed epoch (a UUID): its first 8 hexadecimal digits. */
export function epochTag(epoch: string): string {
  const tag = epoch.replaceAll('-', '').slice(0, 8).toLowerCase();
  if (!new RegExp(`^${TAG_PATTERN}$`).test(tag)) throw new Error(`feed epoch ${epoch} is not a UUID`);
  return tag;
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
