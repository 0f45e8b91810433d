/**
 * A subscriber's catch-up: pages after its cursor until it reaches the tailer's position, then the
 * hand-over to live delivery (hub.ts). The switch happens synchronously against the tailer's
 * position, in the same tick as the check, so no event is missed or repeated: once at the tail, every
 * later event reaches the subscriber through the hub's fan-out. A page arrives as chunks of frames
 * (built by PostgreSQL when it comes from the table: catch-up-reads.ts, or by the subscriber's
 * Selection); a chunk waits for the subscriber's byte budget (slow-readers.ts), and a chunk that
 * finds the socket full waits for it to drain before the next, so Node holds about one chunk past
 * a full socket and the page itself stays the loop's (memory per subscriber: about one page, plus
 * the one read ahead). While one page is written, the next is
 * already being read.
 *
 * Lifecycle: one loop per subscriber at a time (`pumping`), started by the hub when it subscribes
 * and again when a live subscriber's full socket drains; it ends at the tail, or when the
 * subscriber closes. A catch-up read that fails (database down) ends that subscriber with an
 * `unavailable` event and a `retry:` hint; the client resumes from its last id.
 */
import type { FramesRead } from './catch-up-reads.ts';
import { type Cursor, compareCursors, maxCursor } from './cursor.ts';
import { resetFrame, unavailableFrame } from './frames.ts';
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
  /** Whether the subscriber has a byte budget left, whether `bytes` may be written to it now (counted
   * if so), and when it may be written again (slow-readers.ts). */
  ready(sub: Subscriber): boolean;
  admit(sub: Subscriber, bytes: number): boolean;
  granted(sub: Subscriber): Promise<void>;
}

/** Pages kept for subscribers catching up from the same cursor (see readPage). */
const SHARED_PAGES = 32;

export class CatchUp {
  private readonly shared = new Map<string, Promise<FramesRead>>();

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
        // A subscriber on hold waits here, holding no page (thousands of stalled ones may wait).
        if (ahead === undefined && !this.opts.ready(sub)) {
          await this.opts.granted(sub);
          continue;
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
        // The next page is read while this one is written, unless it is a slow subscriber on hold.
        if (page.more && (sub.fast || this.opts.ready(sub))) {
          ahead = { after: page.position, page: this.readPage(sub, page.position) };
          ahead.page.catch(() => {}); // an unused read-ahead must not be an unhandled rejection
        }
        this.opts.stats.frames += page.count;
        for (const chunk of page.chunks) {
          while (!sub.closed && !this.opts.admit(sub, chunk.length)) await this.opts.granted(sub);
          if (sub.closed) return;
          if (sub.sink.write(chunk)) continue;
          sub.blockedSince = Date.now();
          await sub.sink.drained();
          sub.blockedSince = 0;
        }
        sub.cursor = maxCursor(sub.cursor, page.position);
      }
    } catch (err) {
      this.opts.log.warn({ err: (err as Error).message }, 'catch-up read failed; closing subscriber');
      const message = 'database unavailable; reconnect to resume';
      sub.sink.end(unavailableFrame('unavailable', message, this.opts.sseRetryMs));
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

  /**
   * A page after `after`. Subscribers of the same streams catching up from the same cursor (the
   * ones a full socket or a byte budget held at the same page) share one read, its chunks encoded
   * once as Buffers: a thousand of them then hold and write one copy, not a string flattened each.
   * A page stays valid (its events are final; the next read goes on from its position), and only
   * the last SHARED_PAGES are kept; a page with a `reset` is not shared.
   */
  private readPage(sub: Subscriber, after: Cursor): Promise<FramesRead> {
    if (sub.selection !== undefined) return sub.selection.readPage(after, this.opts.pageSize, CHUNK_BYTES);
    const key = `${after.txid}-${after.id}\n${sub.streams.join('\n')}`;
    const shared = this.shared.get(key);
    if (shared !== undefined) return shared;
    const page = this.tailer.catchUp
      .readFrames(sub.streams, sub.streamSet, after, this.opts.pageSize, CHUNK_BYTES)
      .then((read) => (read.reset ? read : { ...read, chunks: read.chunks.map((c) => Buffer.from(c)) }));
    this.shared.set(key, page);
    if (this.shared.size > SHARED_PAGES) this.shared.delete(this.shared.keys().next().value!);
    page.then(
      (read) => read.reset && this.shared.delete(key),
      () => this.shared.delete(key),
    );
    return page;
  }
}
