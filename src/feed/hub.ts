/**
 * The hub fans the tailer's pages out to subscribers by stream, and runs each subscriber's catch-up.
 *
 * A subscription is either live (at the tail: the hub writes new events to it as the tailer reads
 * them, one write per page) or catching up (its own paged reads, from the window or the table, until
 * it reaches the tail). The switch happens synchronously against the tailer's position, so no event
 * is missed or repeated at the hand-over. A live subscriber whose socket buffer fills stops being
 * live, and after `drain` catches up from its cursor like a reconnecting one: memory per subscriber
 * is bounded by one page whatever the publish rate.
 *
 * A subscriber whose socket takes no bytes for `slowSubscriberMaxMs` (a client that stopped reading)
 * is dropped by a periodic sweep: every frame it was sent carries its id, so it resumes from the last
 * one it actually received and loses nothing, and the server holds no buffer for it any longer.
 *
 * Lifecycle: one hub per process, created with the tailer. `close(chunk)` writes `chunk` (a `retry:`
 * hint) to every subscriber and ends them. A catch-up read that fails (database down) ends that
 * subscriber with an `unavailable` event and a `retry:` hint; the client resumes from its last id.
 */
import { type Cursor, compareCursors, maxCursor } from './cursor.ts';
import { namedSseFrame, namesStreams, resetFrame, sseFrame } from './frames.ts';
import type { FeedEvent } from './event.ts';
import type { Tailer } from './tailer.ts';

/** Where a subscription's bytes go (an SSE response). */
export interface Sink {
  /** False when the buffer is full: stop writing until `drained()` resolves. */
  write(chunk: string): boolean;
  /** Resolves on `drain` or when the sink closes. */
  drained(): Promise<void>;
  end(chunk?: string): void;
  /** Drops the connection at once (a subscriber that stopped reading). */
  destroy?(): void;
  /** Bytes written but not yet taken by the socket. */
  buffered?(): number;
}

/** A page of catch-up frames (see Tailer.readFrames). */
export type FramesRead = Awaited<ReturnType<Tailer['readFrames']>>;

/**
 * A subscription that chooses its own events (the Mercure hub's topic matchers, native stream
 * globs): it is offered every event of its streams (of every stream with `allStreams`), keeps those
 * `accepts` takes, frames them its own way, and catches up with its own reader. The hand-over, the
 * backpressure and the slow-subscriber rules are the hub's, as for any subscription.
 */
export interface Selection {
  readonly allStreams?: boolean;
  accepts(e: FeedEvent): boolean;
  frame(e: FeedEvent): string;
  readPage(after: Cursor, limit: number, chunkBytes: number): Promise<FramesRead>;
  /** Retention dropped events past the cursor during catch-up: a chunk to write (and whether to end
   * the stream with it), or undefined to go on from the mark silently (the selection tells its
   * client in its own way). */
  onReset(mark: Cursor): { chunk: string; end: boolean } | undefined;
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

export class Subscription {
  live = false;
  closed = false;
  pumping = false;
  /** Frames gathered for this subscriber during one fan-out. */
  pending = '';
  /** When a write last found the socket full (0: not blocked). Read by the slow-subscriber sweep. */
  blockedSince = 0;
  /** The sink's unsent bytes at the last sweep: a client that is taking bytes is slow, not stuck. */
  lastBuffered = 0;
  readonly streamSet: ReadonlySet<string>;
  /** Its frames name their stream (a connection to several streams: see frames.ts). */
  readonly named: boolean;

  constructor(
    readonly streams: readonly string[],
    public cursor: Cursor,
    readonly sink: Sink,
    readonly selection?: Selection,
  ) {
    this.streamSet = new Set(streams);
    this.named = namesStreams(streams);
  }
}

/** Catch-up frames are written in chunks of about this size; a larger event is its own chunk. */
const CHUNK_BYTES = 64 * 1024;

export interface HubOptions {
  pageSize: number;
  heartbeatMs: number;
  sseRetryMs: number;
  /** Drop a subscriber whose socket has taken nothing for this long (default 30 s). */
  slowSubscriberMaxMs?: number;
  log: { warn(obj: object, msg?: string): void };
}

type Waiter = { streams: readonly string[]; wake: () => void };

export class Hub {
  private readonly byStream = new Map<string, Set<Subscription>>();
  private readonly all = new Set<Subscription>();
  /** Selections offered every event, whatever its stream. */
  private readonly everyStream = new Set<Subscription>();
  private readonly waiters = new Map<string, Set<Waiter>>();
  private readonly listeners = new Map<string, Set<(e: FeedEvent) => void>>();
  private readonly heartbeat: NodeJS.Timeout;
  private readonly sweeper: NodeJS.Timeout;
  /** Dropped slow subscribers whose sockets still have to be destroyed (by the next sweep). */
  private readonly dropping = new Set<Subscription>();
  /** delivered: live fan-out writes; frames: event frames written (live and catch-up); dropped: slow
   * subscribers cut off. Read by /metrics at scrape time. */
  readonly stats = { delivered: 0, frames: 0, dropped: 0 };

  constructor(
    private readonly tailer: Tailer,
    private readonly opts: HubOptions,
  ) {
    this.heartbeat = setInterval(() => this.beat(), opts.heartbeatMs);
    this.heartbeat.unref();
    const slowMs = opts.slowSubscriberMaxMs ?? 30000;
    this.sweeper = setInterval(() => this.sweep(slowMs), Math.max(25, Math.min(1000, slowMs >>> 2)));
    this.sweeper.unref();
  }

  get subscriberCount(): number {
    return this.all.size;
  }

  /** Nobody here waits for new events (no subscriber, long-poll or listener): the tailer may defer. */
  get idle(): boolean {
    return this.all.size === 0 && this.waiters.size === 0 && this.listeners.size === 0;
  }

  /** Starts delivering events of `streams` after `cursor` to `sink`. */
  subscribe(streams: readonly string[], cursor: Cursor, sink: Sink, selection?: Selection): Subscription {
    const sub = new Subscription(streams, cursor, sink, selection);
    this.all.add(sub);
    this.tailer.hurry();
    if (selection?.allStreams) this.everyStream.add(sub);
    else
      for (const s of streams) {
        const set = this.byStream.get(s);
        if (set) set.add(sub);
        else this.byStream.set(s, new Set([sub]));
      }
    void this.pump(sub);
    return sub;
  }

  unsubscribe(sub: Subscription): void {
    if (sub.closed) return;
    sub.closed = true;
    sub.live = false;
    this.all.delete(sub);
    this.everyStream.delete(sub);
    for (const s of sub.streams) {
      const set = this.byStream.get(s);
      set?.delete(sub);
      if (set?.size === 0) this.byStream.delete(s);
    }
  }

  /** Called by the tailer with each new page, in feed order. */
  onEvents(events: readonly FeedEvent[]): void {
    const touched: Subscription[] = [];
    let frames = 0;
    const offer = (sub: Subscription, e: FeedEvent) => {
      if (!sub.live || compareCursors(e, sub.cursor) <= 0) return;
      let frame: string;
      // Each form is built once per event and cached on it, whoever receives it.
      if (sub.selection === undefined) frame = sub.named ? namedSseFrame(e) : sseFrame(e);
      else if (sub.selection.accepts(e)) frame = sub.selection.frame(e);
      else return;
      if (sub.pending === '') touched.push(sub);
      sub.pending += frame;
      sub.cursor = e;
      frames++;
    };
    for (const e of events) {
      const subs = this.byStream.get(e.stream);
      if (subs !== undefined) for (const sub of subs) offer(sub, e);
      if (this.everyStream.size > 0) for (const sub of this.everyStream) offer(sub, e);
      const ws = this.waiters.get(e.stream);
      if (ws !== undefined) for (const w of ws) this.release(w);
      const ls = this.listeners.get(e.stream);
      if (ls !== undefined) for (const l of ls) l(e);
    }
    this.stats.frames += frames;
    for (const sub of touched) {
      const chunk = sub.pending;
      sub.pending = '';
      this.stats.delivered++;
      if (!sub.sink.write(chunk)) {
        // Full socket: leave the live set; catch up from the cursor once it drains.
        sub.live = false;
        sub.blockedSince = Date.now();
        void sub.sink.drained().then(() => {
          sub.blockedSince = 0;
          return this.pump(sub);
        });
      }
    }
  }

  /**
   * Resolves when an event of one of `streams` arrives, after `ms`, or when `signal` aborts —
   * whichever comes first. Holds no database connection while waiting (long-poll).
   */
  waitForEvents(streams: readonly string[], ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const w: Waiter = { streams, wake: () => {} };
      const timer = setTimeout(() => this.release(w), ms);
      const onAbort = () => this.release(w);
      w.wake = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        resolve();
      };
      for (const s of streams) {
        const set = this.waiters.get(s);
        if (set) set.add(w);
        else this.waiters.set(s, new Set([w]));
      }
      signal?.addEventListener('abort', onAbort, { once: true });
      if (signal?.aborted) this.release(w);
      else this.tailer.hurry();
    });
  }

  /**
   * Calls `fn` synchronously with every event of `stream` the tailer reads from now on, in feed order,
   * until the returned function is called. For in-process consumers that decide for themselves whom
   * an event wakes (queue claims wake as many waiters as there are jobs). `fn` must not throw.
   */
  listen(stream: string, fn: (e: FeedEvent) => void): () => void {
    let set = this.listeners.get(stream);
    if (!set) {
      set = new Set();
      this.listeners.set(stream, set);
    }
    set.add(fn);
    this.tailer.hurry();
    return () => {
      const s = this.listeners.get(stream);
      s?.delete(fn);
      if (s?.size === 0) this.listeners.delete(stream);
    };
  }

  private release(w: Waiter): void {
    for (const s of w.streams) {
      const set = this.waiters.get(s);
      set?.delete(w);
      if (set?.size === 0) this.waiters.delete(s);
    }
    w.wake();
  }

  /**
   * Catch-up: reads pages after the subscriber's cursor until it reaches the tail, then goes live.
   * A page arrives as chunks of frames (built by PostgreSQL when it comes from the table) and is
   * written whole, so memory per subscriber stays about one page; a full socket pauses the loop
   * until it drains. While one page is written, the next is already being read.
   */
  private async pump(sub: Subscription): Promise<void> {
    if (sub.pumping) return;
    sub.pumping = true;
    let ahead: { after: Cursor; page: ReturnType<Hub['readPage']> } | undefined;
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
          // Retention dropped events past this cursor: say so before anything else, then go on
          // from the trim mark (the frame's id moves the client's Last-Event-ID there too).
          const said = sub.selection
            ? sub.selection.onReset(page.reset)
            : { chunk: resetFrame(page.reset), end: false };
          if (said?.end) {
            sub.sink.end(said.chunk);
            this.unsubscribe(sub);
            return;
          }
          if (said !== undefined) sub.sink.write(said.chunk);
          sub.cursor = page.position;
          continue;
        }
        if (page.more) {
          ahead = { after: page.position, page: this.readPage(sub, page.position) };
          ahead.page.catch(() => {}); // an unused read-ahead must not be an unhandled rejection
        }
        this.stats.frames += page.count;
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
      this.unsubscribe(sub);
    } finally {
      sub.pumping = false;
    }
  }

  private readPage(sub: Subscription, after: Cursor): ReturnType<Tailer['readFrames']> {
    if (sub.selection !== undefined) return sub.selection.readPage(after, this.opts.pageSize, CHUNK_BYTES);
    return this.tailer.readFrames(sub.streams, sub.streamSet, after, this.opts.pageSize, CHUNK_BYTES);
  }

  /**
   * Drops subscribers whose socket has been full, taking no bytes, for longer than `slowMs` (one that
   * drains its buffer at all, however slowly, restarts the clock). The ones dropped by the
   * previous sweep are destroyed now: `end()` gave a client that is merely slow the chance to read
   * the rest and the `retry:` hint; one that is not reading at all holds nothing after this.
   */
  private sweep(slowMs: number): void {
    for (const sub of this.dropping) sub.sink.destroy?.();
    this.dropping.clear();
    const now = Date.now();
    for (const sub of this.all) {
      if (sub.blockedSince === 0) continue;
      const buffered = sub.sink.buffered?.() ?? 0;
      if (buffered < sub.lastBuffered) sub.blockedSince = now; // it took bytes since the last sweep
      sub.lastBuffered = buffered;
      if (now - sub.blockedSince < slowMs) continue;
      this.stats.dropped++;
      this.opts.log.warn(
        {
          streams: sub.streams.slice(0, 5),
          cursor: `${sub.cursor.txid}-${sub.cursor.id}`,
          blockedMs: now - sub.blockedSince,
        },
        'slow SSE subscriber dropped (it resumes from its last id)',
      );
      sub.sink.end(
        `retry: ${this.opts.sseRetryMs}\n: slow subscriber dropped; reconnect with Last-Event-ID\n\n`,
      );
      this.unsubscribe(sub);
      this.dropping.add(sub);
    }
  }

  /** Bytes written to subscribers' sockets and not yet taken by them (scrape time only: O(subscribers)). */
  bufferedBytes(): number {
    let n = 0;
    for (const sub of this.all) n += sub.sink.buffered?.() ?? 0;
    for (const sub of this.dropping) n += sub.sink.buffered?.() ?? 0;
    return n;
  }

  private beat(): void {
    for (const sub of this.all) if (sub.live) sub.sink.write(':\n\n');
  }

  /** Ends every subscription with `chunk` (e.g. a `retry:` hint at shutdown). */
  close(chunk?: string): void {
    clearInterval(this.heartbeat);
    clearInterval(this.sweeper);
    for (const sub of this.dropping) sub.sink.destroy?.();
    this.dropping.clear();
    for (const sub of [...this.all]) {
      sub.sink.end(chunk);
      this.unsubscribe(sub);
    }
    for (const set of [...this.waiters.values()]) for (const w of [...set]) this.release(w);
  }
}
