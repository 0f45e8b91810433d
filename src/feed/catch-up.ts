/**
 * A subscriber's catch-up: pages after its cursor until it reaches the tailer's position, then the
 * hand-over to live delivery (hub.ts). The switch happens synchronously against the tailer's
 * position, in the same tick as the check, so no event is missed or repeated: once at the tail, every
 * later event reaches the subscriber through the hub's fan-out. A page arrives as chunks of frames
 * (built by PostgreSQL when it comes from the table: catch-up-reads.ts, or by the subscriber's
 * Selection) and is written whole, so memory per subscriber stays about one page; a full socket
 * pauses the loop until it drains. While one page is written, the next is already being read.
 *
 * Lifecycle: one loop per subscriber at a time (`pumping`), started by the hub when it subscribes
 * and again when a live subscriber's full socket drains; it ends at the tail, or when the
 * subscriber closes. A catch-up read that fails (database down) ends that subscriber with an
 * `unavailable` event and a `retry:` hint; the client resumes from its last id.
 */
import type { FramesRead } from './catch-up-reads.ts';
import { type Cursor, compareCursors, maxCursor } from './cursor.ts';
import { resetFrame } from './frames.ts';
import type { Subscriber } from './subscriber.ts';
import type { Tailer } from './tailer.ts';

/** Catch-up frames are written in chunks of about this size; a larger event is its own chunk. */
const CHUNK_BYTES = 64 * 1024;

export interface CatchUpOptions {
  pageSize: number;
  sseRetryMs: number;
  log: { warn(obj: object, msg?: string): void };
  /** The hub's counters: frames written. */
  stats: { frames: number };
  /** Ends the subscriber in the hub (a `reset` that ends the stream, a failed read). */
  unsubscribe(sub: Subscriber): void;
}

export class CatchUp {
  constructor(
    private readonly tailer: Tailer,
    private readonly opts: CatchUpOptions,
  ) {}

  /** Reads pages after the subscriber's cursor until it reaches the tail, then makes it live. */
  async run(sub: Subscriber): Promise<void> {
    if (sub.pumping) return;
    sub.pumping = true;
    let ahead: { after: Cursor; page: Promise<FramesRead> } | undefined;
    try {
      while (!sub.closed) {
        // Synchronous with fan-out: once at the tail, every later event reaches us through onEvents.
        if (compareCursors(sub.cursor, this.tailer.position) >= 0) {
          sub.live = true;
          return;
        }
        const page = await (ahead !== undefined && compareCursors(ahead.after, sub.cursor) === 0
          ? ahead.page
          : this.readPage(sub, sub.cursor));
        ahead = undefined;
        if (sub.closed) return;
        if (page.reset) {
          // Retention dropped events past this cursor: say so, then go on from the trim mark.
          if (this.reset(sub, page.reset)) return;
          sub.cursor = page.position;
          continue;
        }
        if (page.more) {
          ahead = { after: page.position, page: this.readPage(sub, page.position) };
          ahead.page.catch(() => {}); // an unused read-ahead must not be an unhandled rejection
        }
        this.opts.stats.frames += page.count;
        let ok = true;
        for (const chunk of page.chunks) ok = sub.sink.write(chunk) && ok;
        sub.cursor = maxCursor(sub.cursor, page.position);
        if (!ok) {
          sub.blockedSince = Date.now();
          await sub.sink.drained();
          sub.blockedSince = 0;
        }
      }
    } catch (err) {
      this.opts.log.warn({ err: (err as Error).message }, 'catch-up read failed; closing subscriber');
      const body = JSON.stringify({
        code: 'unavailable',
        message: 'database unavailable; reconnect to resume',
      });
      sub.sink.end(`event: unavailable\ndata: ${body}\nretry: ${this.opts.sseRetryMs}\n\n`);
      this.opts.unsubscribe(sub);
    } finally {
      sub.pumping = false;
    }
  }

  /**
   * Retention dropped events past the subscriber's cursor: says so before anything else (the frame's
   * id moves the client's Last-Event-ID to the trim mark too), or lets its selection say it its own
   * way. True when that ended the stream.
   */
  private reset(sub: Subscriber, mark: Cursor): boolean {
    const said = sub.selection
      ? sub.selection.onReset(mark)
      : { chunk: resetFrame(mark, this.tailer.history.tag), end: false };
    if (said?.end) {
      sub.sink.end(said.chunk);
      this.opts.unsubscribe(sub);
      return true;
    }
    if (said !== undefined) sub.sink.write(said.chunk);
    return false;
  }

  private readPage(sub: Subscriber, after: Cursor): Promise<FramesRead> {
    if (sub.selection !== undefined) return sub.selection.readPage(after, this.opts.pageSize, CHUNK_BYTES);
    return this.tailer.readFrames(sub.streams, sub.streamSet, after, this.opts.pageSize, CHUNK_BYTES);
  }
}
