/**
 * The SSE frame of an event, in the two places it is built: here in JavaScript for live fan-out
 * (built once per event, shared by every subscriber), and in SQL for catch-up reads from the table,
 * where PostgreSQL concatenates a whole page of frames into one string so this process passes the
 * bytes through instead of parsing rows into objects and re-serialising them (measured: most of a
 * catch-up's server CPU went to row parsing and garbage). The two must agree byte for byte; a test
 * (test/frames.test.ts) compares them on hostile data.
 *
 * A connection to several streams gets frames whose `id:` names the stream after the cursor:
 * `id: 7350-12.9f86d081/orders`. A browser's EventSource hands a listener only the event name, `lastEventId`
 * and `data`; the event name is the publisher's type and the data is the publisher's JSON, so the
 * id is the one field the server owns. The cursor part stays the resume point: a reconnecting
 * EventSource sends the whole id back as Last-Event-ID and the server reads the cursor from it
 * (parseCursor accepts the suffix). A connection to one stream keeps the plain `id: 7350-12.9f86d081`
 * (every cursor ends with the feed's tag: cursor.ts).
 * Both forms are built at most once per event and cached on it, so a fan-out to many subscribers
 * costs no per-subscriber string work whichever form each one gets.
 */
import { type Cursor, formatCursor, parseCursor } from './cursor.ts';
import type { FeedEvent } from './event.ts';
import type { NotInFeed } from './history.ts';

/** True when a connection to `streams` gets frames that name their stream (namedSseFrame). */
export function namesStreams(streams: readonly string[]): boolean {
  return streams.length > 1;
}

/** The frame builder for a connection to `streams`. */
export function framerFor(streams: readonly string[]): (e: FeedEvent) => string {
  return namesStreams(streams) ? namedSseFrame : sseFrame;
}

/** The SSE frame for an event, built once and cached on it. */
export function sseFrame(e: FeedEvent): string {
  if (e.frame === undefined) e.frame = `id: ${e.cursor}\n${frameRest(e)}`;
  return e.frame;
}

/** The frame for a connection to several streams: the id is `<cursor>/<stream>`. Cached on the event. */
export function namedSseFrame(e: FeedEvent): string {
  if (e.namedFrame === undefined) e.namedFrame = `id: ${e.cursor}/${e.stream}\n${frameRest(e)}`;
  return e.namedFrame;
}

/** A frame after its `id:` line. */
function frameRest(e: FeedEvent): string {
  // JSON text is one line unless it carries whitespace newlines between tokens (a raw SQL write);
  // those are insignificant, and SSE needs one line per `data:`.
  const data = e.data.includes('\n') || e.data.includes('\r') ? e.data.replace(/\r\n|\r|\n/g, ' ') : e.data;
  return e.type === null ? `data: ${data}\n\n` : `event: ${e.type}\ndata: ${data}\n\n`;
}

/** The frames of the events `frameOf` takes (undefined: skipped), in chunks of about `chunkBytes`. */
export function chunkFrames(
  events: readonly FeedEvent[],
  frameOf: (e: FeedEvent) => string | undefined,
  chunkBytes: number,
): { chunks: string[]; count: number } {
  const chunks: string[] = [];
  let chunk = '';
  let count = 0;
  for (const e of events) {
    const frame = frameOf(e);
    if (frame === undefined) continue;
    count++;
    if (chunk.length + frame.length > chunkBytes && chunk !== '') {
      chunks.push(chunk);
      chunk = '';
    }
    chunk += frame;
  }
  if (chunk !== '') chunks.push(chunk);
  return { chunks, count };
}

/** sseFrame() in SQL, for a row `f` of commitfeed.feed; `$tag` is the statement's argument holding
 * the feed's tag as its cursors end (cursor.ts: tagSuffix). */
export function sseFrameSql(tag: string): string {
  return frameSql(tag, '');
}

/** namedSseFrame() in SQL: the catch-up of a connection to several streams. */
export function namedSseFrameSql(tag: string): string {
  return frameSql(tag, ` || '/' || f.stream`);
}

function frameSql(tag: string, idSuffix: string): string {
  return `'id: ' || f.txid::text || '-' || f.id::text || ${tag}::text${idSuffix} || E'\\n'
      || coalesce('event: ' || f.type || E'\\n', '')
      || 'data: ' || (case when strpos(f.data::text, E'\\n') > 0 or strpos(f.data::text, E'\\r') > 0
                          then regexp_replace(f.data::text, E'\\r\\n|\\r|\\n', ' ', 'g')
                          else f.data::text end)
      || E'\\n\\n'`;
}

/**
 * The cursor of the last frame in a string of frames (null when empty). Frames end with a blank line
 * and a `data:` line never holds a raw newline, so the last frame starts after the last-but-one
 * blank line, with its `id:` line (plain or naming its stream).
 */
export function lastFrameCursor(frames: string): Cursor | null {
  if (frames === '') return null;
  const k = frames.lastIndexOf('\n\n', frames.length - 3);
  const from = k === -1 ? 0 : k + 2;
  const eol = frames.indexOf('\n', from);
  const id = frames.slice(from + 4, eol); // after "id: "
  const slash = id.indexOf('/');
  const c = parseCursor(slash === -1 ? id : id.slice(0, slash));
  return c === undefined ? null : { txid: c.txid, id: c.id };
}

/** Why a reader is told `reset`: retention dropped events past its cursor (`trimmed`), or its
 * cursor is not a position of this feed (history.ts: `ahead`, `foreign`). */
export type ResetReason = 'trimmed' | NotInFeed;

/** The `reset` signal's body, `{"reason","resumeFrom"}` (SSE data; a JSON read's `reset` property). */
export function resetJson(reason: ResetReason, resumeFrom: Cursor, tag: string): string {
  return `{"reason":"${reason}","resumeFrom":"${formatCursor(resumeFrom, tag)}"}`;
}

/**
 * The in-band "you missed events" signal, before anything else: retention dropped events at or
 * before `resumeFrom` (`trimmed`), or the cursor is not in this feed and the reader goes on from
 * `resumeFrom` (UNKNOWN_CURSOR_RESUME). The frame's id moves the client's Last-Event-ID there.
 */
export function resetFrame(resumeFrom: Cursor, tag: string, reason: ResetReason = 'trimmed'): string {
  return `id: ${formatCursor(resumeFrom, tag)}\nevent: reset\ndata: ${resetJson(reason, resumeFrom, tag)}\n\n`;
}

/**
 * The frame that ends a stream which cannot go on now (the database lost mid-stream): `event:
 * unavailable` with `{"code","message"}`, no id (the client keeps its Last-Event-ID), and a `retry:`
 * hint, which EventSource follows, reconnecting with that id.
 */
export function unavailableFrame(code: string, message: string, retryMs: number): string {
  return `event: unavailable\ndata: ${JSON.stringify({ code, message })}\nretry: ${retryMs}\n\n`;
}
