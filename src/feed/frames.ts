/**
 * The SSE frame of an event, in the two places it is built: here in JavaScript for live fan-out
 * (built once per event, shared by every subscriber), and in SQL for catch-up reads from the table,
 * where PostgreSQL concatenates a whole page of frames into one string so this process passes the
 * bytes through instead of parsing rows into objects and re-serialising them (measured: most of a
 * catch-up's server CPU went to row parsing and garbage). The two must agree byte for byte; a test
 * (test/frames.test.ts) compares them on hostile data.
 */
import { type Cursor, parseCursor } from './cursor.ts';
import type { FeedEvent } from './event.ts';

/** The SSE frame for an event, built once and cached on it. */
export function sseFrame(e: FeedEvent): string {
  if (e.frame === undefined) {
    // JSON text is one line unless it carries whitespace newlines between tokens (a raw SQL write);
    // those are insignificant, and SSE needs one line per `data:`.
    const data = e.data.includes('\n') || e.data.includes('\r') ? e.data.replace(/\r\n|\r|\n/g, ' ') : e.data;
    e.frame =
      e.type === null
        ? `id: ${e.cursor}\ndata: ${data}\n\n`
        : `id: ${e.cursor}\nevent: ${e.type}\ndata: ${data}\n\n`;
  }
  return e.frame;
}

/** sseFrame() in SQL, for a row `f` of commitfeed.feed. */
export const SSE_FRAME_SQL = `'id: ' || f.txid::text || '-' || f.id::text || E'\\n'
      || coalesce('event: ' || f.type || E'\\n', '')
      || 'data: ' || (case when strpos(f.data::text, E'\\n') > 0 or strpos(f.data::text, E'\\r') > 0
                          then regexp_replace(f.data::text, E'\\r\\n|\\r|\\n', ' ', 'g')
                          else f.data::text end)
      || E'\\n\\n'`;

/**
 * The cursor of the last frame in a string of frames (null when empty). Frames end with a blank line
 * and a `data:` line never holds a raw newline, so the last frame starts after the last-but-one
 * blank line, with its `id:` line.
 */
export function lastFrameCursor(frames: string): Cursor | null {
  if (frames === '') return null;
  const k = frames.lastIndexOf('\n\n', frames.length - 3);
  const from = k === -1 ? 0 : k + 2;
  const eol = frames.indexOf('\n', from);
  return parseCursor(frames.slice(from + 4, eol)) ?? null; // after "id: "
}

/** The in-band "you missed events" signal: retention dropped events at or before `mark`. */
export function resetFrame(mark: Cursor): string {
  const c = `${mark.txid}-${mark.id}`;
  return `id: ${c}\nevent: reset\ndata: {"reason":"trimmed","resumeFrom":"${c}"}\n\n`;
}
