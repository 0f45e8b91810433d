/**
 * Catch-up reads: a reader's events after its cursor, up to the tailer's position, from the tailer's
 * window when it covers the cursor, else from the table (on a standby through FeedReads, see
 * reads.ts). Every SSE catch-up page and JSON read of streams goes through here (the tailer's read()
 * and readFrames()); selections with reads of their own (stream globs, Mercure topics) follow the
 * same rules: never past the tailer's position, so every event returned is final, and a `reset`
 * when the cursor is below the trim mark.
 *
 * No state of its own: the tailer's window, the trim marks and the standbys' states are their owners'.
 */
import { type Cursor, compareCursors, maxCursor } from './cursor.ts';
import type { FeedEvent } from './event.ts';
import { chunkFrames, framerFor } from './frames.ts';
import { readRange } from './queries/read-range.ts';
import { readRangeFrames } from './queries/read-range-frames.ts';
import type { FeedHistory } from './history.ts';
import type { FeedReads } from './reads.ts';
import type { TrimMarks } from './trim-marks.ts';

/** What catch-up needs of the tailer: its live tail and the window of recent events behind it. */
export interface LiveTail {
  /** The position up to which every finished event has been read. */
  readonly position: Cursor;
  /** True when every event after `after` up to the tail is in the window. */
  inWindow(after: Cursor): boolean;
  /** Up to `limit` events of `streams` after `after`, from the window (requires inWindow(after)). */
  fromWindow(streams: ReadonlySet<string>, after: Cursor, limit: number): FeedEvent[];
}

/** A page of events. `reset` (with no events): see CatchUpReads.read. */
export interface EventsRead {
  events: FeedEvent[];
  position: Cursor;
  reset?: Cursor;
}

/** A page of catch-up frames (see CatchUpReads.readFrames). */
export interface FramesRead {
  chunks: (string | Uint8Array)[];
  count: number;
  position: Cursor;
  more: boolean;
  reset?: Cursor;
}

export class CatchUpReads {
  constructor(
    private readonly tail: LiveTail,
    private readonly reads: FeedReads,
    private readonly marks: TrimMarks,
    private readonly history: FeedHistory,
  ) {}

  /** The trim mark as of now (a fresh, shared read): retention may have dropped events after a
   * cursor below it; it is the earliest position retention still holds. */
  trimMark(): Promise<Cursor> {
    return this.marks.current();
  }

  /**
   * Up to `limit` events of `streams` after `after`, from the window when it covers the cursor,
   * else from the table; never past the tail (or `reach`), so every event returned is final. `position` is where
   * the next read continues: the last event returned, or the tail when nothing else matched.
   *
   * `reset` (with no events): `after` is below the trim mark, so retention may have dropped events
   * this reader never saw. The reader must say so in-band before anything else (an SSE `reset`
   * frame, a `reset` property in JSON) and continue from `position`, the trim mark. A cursor the
   * window covers needs no check: every event after it is in memory. The window serves only cursors
   * at or past a trim mark read after the request began (see trim-marks.ts).
   */
  async read(
    streams: readonly string[],
    streamSet: ReadonlySet<string>,
    after: Cursor,
    limit: number,
    reach?: Cursor,
  ): Promise<EventsRead> {
    // `reach` (from safePosition) may be past the tail: that stretch is final but not yet in memory.
    const limitOf = () => (reach === undefined ? this.tail.position : maxCursor(this.tail.position, reach));
    if (compareCursors(after, limitOf()) >= 0) return { events: [], position: after };
    let fromWindow = this.tail.inWindow(after);
    if (fromWindow) fromWindow = compareCursors(after, await this.marks.current()) >= 0;
    // Taken after the await, in the same tick as the window read: the window may have grown meanwhile.
    const upTo = limitOf();
    let events: FeedEvent[];
    if (fromWindow && this.tail.inWindow(after) && compareCursors(upTo, this.tail.position) === 0) {
      events = this.tail.fromWindow(streamSet, after, limit);
    } else {
      const range = await this.reads.range(upTo, (db) =>
        readRange(db, streams, after, upTo, limit, this.history.suffix),
      );
      if (compareCursors(after, range.trimMark) < 0) {
        return { events: [], position: range.trimMark, reset: range.trimMark };
      }
      events = range.events;
    }
    const position = events.length === limit ? events[events.length - 1] : upTo;
    return { events, position };
  }

  /**
   * read() for SSE: the same events as SSE frames, in chunks to write in order (`count` events).
   * From the table, PostgreSQL builds the frames (see frames.ts) unless the page holds an event
   * larger than `chunkBytes`; such a page is read as rows, each large frame its own chunk.
   * `more`: the page stopped at `limit`, so events may follow `position`.
   */
  async readFrames(
    streams: readonly string[],
    streamSet: ReadonlySet<string>,
    after: Cursor,
    limit: number,
    chunkBytes: number,
  ): Promise<FramesRead> {
    const upTo = this.tail.position;
    if (compareCursors(after, upTo) >= 0) return { chunks: [], count: 0, position: after, more: false };
    if (!this.tail.inWindow(after)) {
      const page = await this.reads.range(upTo, (db) =>
        readRangeFrames(db, streams, after, upTo, limit, chunkBytes, this.history.suffix),
      );
      if (compareCursors(after, page.trimMark) < 0) {
        return { chunks: [], count: 0, position: page.trimMark, more: true, reset: page.trimMark };
      }
      if (page.frames !== null) {
        const more = page.more && page.last !== null;
        return { chunks: [page.frames], count: page.count, position: more ? page.last! : upTo, more };
      }
    }
    const { events, position, reset } = await this.read(streams, streamSet, after, limit);
    if (reset) return { chunks: [], count: 0, position, more: true, reset };
    const { chunks, count } = chunkFrames(events, framerFor(streams), chunkBytes);
    return { chunks, count, position, more: events.length === limit };
  }
}
