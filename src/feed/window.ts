/**
 * The tailer's bounded in-memory window: every event of the whole feed in (start, tail], in feed
 * order. Subscribers whose cursor is at or after `start` are served from here without a query; older
 * cursors catch up from the table. Memory is bounded by `capacity` events.
 */
import { type Cursor, compareCursors } from './cursor.ts';
import type { FeedEvent } from './event.ts';

export class EventWindow {
  private events: FeedEvent[] = [];
  private head = 0; // events[head..] are live; the prefix is dropped in chunks
  start: Cursor;
  tail: Cursor;

  constructor(
    position: Cursor,
    private readonly capacity: number,
  ) {
    this.start = position;
    this.tail = position;
  }

  get size(): number {
    return this.events.length - this.head;
  }

  /** True when every event after `c` up to the tail is in the window. */
  covers(c: Cursor): boolean {
    return compareCursors(c, this.start) >= 0;
  }

  /** Adds events that follow the tail (in order) and moves the tail to `tail`. */
  append(events: readonly FeedEvent[], tail: Cursor): void {
    for (const e of events) this.events.push(e);
    this.tail = tail;
    const excess = this.size - this.capacity;
    if (excess > 0) {
      this.head += excess;
      this.start = this.events[this.head - 1];
      // Compact once the dropped prefix is as large as the window: amortised O(1) per event.
      if (this.head >= this.capacity) {
        this.events = this.events.slice(this.head);
        this.head = 0;
      }
    }
  }

  /**
   * Up to `limit` events after `after` whose stream is in `streams` (all streams when null).
   * Requires covers(after).
   */
  read(streams: ReadonlySet<string> | null, after: Cursor, limit: number): FeedEvent[] {
    const out: FeedEvent[] = [];
    for (let i = this.indexAfter(after); i < this.events.length && out.length < limit; i++) {
      const e = this.events[i];
      if (streams === null || streams.has(e.stream)) out.push(e);
    }
    return out;
  }

  /** Index of the first event after `c` (binary search). */
  private indexAfter(c: Cursor): number {
    let lo = this.head;
    let hi = this.events.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (compareCursors(this.events[mid], c) <= 0) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}
