/**
 * The hub fans the tailer's pages out to subscribers by stream, and starts each subscriber's
 * catch-up (catch-up.ts), which hands it over to live delivery here once it reaches the tail.
 *
 * A subscriber is either live (at the tail: the hub writes new events to it as the tailer reads
 * them, one write per page) or catching up (its own paged reads, from the window or the table, until
 * it reaches the tail). The switch happens synchronously against the tailer's position, so no event
 * is missed or repeated at the hand-over. A live subscriber whose socket buffer fills stops being
 * live, and after `drain` catches up from its cursor like a reconnecting one: memory per subscriber
 * is bounded by one page whatever the publish rate. Long-polls and in-process listeners wait here
 * for the events of their streams too.
 *
 * A subscriber that reads too slowly, or not at all, is dropped with a reset by the slow-reader
 * sweep (slow-readers.ts: its socket full for too long, too many bytes in flight, or all SSE
 * connections' bytes in flight over their cap): every frame it was sent carries its id, so it resumes
 * from the last one it actually received and loses nothing, and neither Node nor the kernel holds a
 * buffer for it any longer. A subscriber closed or dropped while a page is fanned out is handed
 * nothing more, even what was gathered for it earlier in that page.
 *
 * Lifecycle: one hub per process, created with the tailer; its heartbeat and sweep run on unref'd
 * intervals. `close(chunk)` stops them, writes `chunk` (a `retry:` hint) to every subscriber, ends
 * them and releases every long-poll. A catch-up read that fails ends that subscriber only (catch-up.ts).
 */
import { CatchUp } from './catch-up.ts';
import { type Cursor, compareCursors } from './cursor.ts';
import type { FeedEvent } from './event.ts';
import { namedSseFrame, sseFrame } from './frames.ts';
import { SlowReaders } from './slow-readers.ts';
import { type Selection, type Sink, Subscriber } from './subscriber.ts';
import type { Tailer } from './tailer.ts';

export interface HubOptions {
  pageSize: number;
  heartbeatMs: number;
  sseRetryMs: number;
  /** SLOW_SUBSCRIBER_TIMEOUT: drop a subscriber whose socket has stayed full this long (10 s). */
  slowSubscriberMaxMs?: number;
  /** SSE_MAX_IN_FLIGHT_BYTES (1 MiB) and SSE_MAX_TOTAL_IN_FLIGHT_BYTES (128 MiB): slow-readers.ts. */
  sseMaxInFlightBytes?: number;
  sseMaxTotalInFlightBytes?: number;
  log: { warn(obj: object, msg?: string): void };
}

type Waiter = { streams: readonly string[]; wake: () => void };

export class Hub {
  private readonly byStream = new Map<string, Set<Subscriber>>();
  private readonly all = new Set<Subscriber>();
  /** Selections offered every event, whatever its stream. */
  private readonly everyStream = new Set<Subscriber>();
  private readonly waiters = new Map<string, Set<Waiter>>();
  private readonly listeners = new Map<string, Set<(e: FeedEvent) => void>>();
  private readonly heartbeat: NodeJS.Timeout;
  /** delivered: live fan-out writes; frames: event frames written (live and catch-up); dropped: slow
   * subscribers cut off (by reason: `slow.stats`). Read by /metrics at scrape time. */
  readonly stats = { delivered: 0, frames: 0, dropped: 0 };
  /** The slow-reader sweep: bytes in flight, drops by reason. */
  readonly slow: SlowReaders;
  private readonly catchUp: CatchUp;

  constructor(
    private readonly tailer: Tailer,
    private readonly opts: HubOptions,
  ) {
    this.catchUp = new CatchUp(tailer, {
      pageSize: opts.pageSize,
      sseRetryMs: opts.sseRetryMs,
      log: opts.log,
      stats: this.stats,
      unsubscribe: (sub) => this.unsubscribe(sub),
      ready: (sub) => this.slow.ready(sub),
      admit: (sub, bytes) => this.slow.admit(sub, bytes),
      granted: (sub) => this.slow.granted(sub),
    });
    this.heartbeat = setInterval(() => this.beat(), opts.heartbeatMs);
    this.heartbeat.unref();
    this.slow = new SlowReaders({
      slowMs: opts.slowSubscriberMaxMs ?? 10_000,
      maxInFlight: opts.sseMaxInFlightBytes ?? 1024 * 1024,
      maxTotalInFlight: opts.sseMaxTotalInFlightBytes ?? 128 * 1024 * 1024,
      subscribers: () => this.all,
      drop: (sub) => this.drop(sub),
      log: opts.log,
    });
  }

  /**
   * SSE streams open in this process, from open to close (counted by src/http/sse.ts): what
   * MAX_SSE_CONNECTIONS limits and the metrics report. A stream still deciding where it starts
   * (src/http/feed-sse.ts) holds its connection before it is a subscriber.
   */
  openStreams = 0;

  get subscriberCount(): number {
    return this.all.size;
  }

  /** Nobody here waits for new events (no subscriber, long-poll or listener): the tailer may defer. */
  get idle(): boolean {
    return this.all.size === 0 && this.waiters.size === 0 && this.listeners.size === 0;
  }

  /** Starts delivering events of `streams` after `cursor` to `sink`. */
  subscribe(streams: readonly string[], cursor: Cursor, sink: Sink, selection?: Selection): Subscriber {
    const sub = new Subscriber(streams, cursor, sink, selection);
    this.slow.enroll(sub);
    this.all.add(sub);
    this.tailer.hurry();
    if (selection?.allStreams) this.everyStream.add(sub);
    else
      for (const s of streams) {
        const set = this.byStream.get(s);
        if (set) set.add(sub);
        else this.byStream.set(s, new Set([sub]));
      }
    void this.catchUp.run(sub);
    return sub;
  }

  unsubscribe(sub: Subscriber): void {
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

  /**
   * Called by the tailer with each new page, in feed order. The frames gathered for each subscriber
   * are written once the page is offered, even when a listener throws part-way (the error still
   * reaches the tailer): left gathered, they would never be written, and every later frame for that
   * subscriber would pile up behind them.
   */
  onEvents(events: readonly FeedEvent[]): void {
    const touched: Subscriber[] = [];
    const offer = (sub: Subscriber, e: FeedEvent) => {
      if (!sub.live || compareCursors(e, sub.cursor) <= 0) return;
      let frame: string;
      // Each form is built once per event and cached on it, whoever receives it.
      if (sub.selection === undefined) frame = sub.named ? namedSseFrame(e) : sseFrame(e);
      else if (sub.selection.accepts(e)) frame = sub.selection.frame(e);
      else return;
      if (sub.pending === '') {
        touched.push(sub);
        sub.pendingFrom = sub.cursor;
        sub.pendingFirst = e;
        sub.pendingFrames = 0;
      }
      sub.pending += frame;
      sub.pendingFrames++;
      sub.cursor = e;
    };
    try {
      for (const e of events) {
        const subs = this.byStream.get(e.stream);
        if (subs !== undefined) for (const sub of subs) offer(sub, e);
        if (this.everyStream.size > 0) for (const sub of this.everyStream) offer(sub, e);
        const ws = this.waiters.get(e.stream);
        if (ws !== undefined) for (const w of ws) this.release(w);
        const ls = this.listeners.get(e.stream);
        if (ls !== undefined) for (const l of ls) l(e);
      }
    } finally {
      const shared = new Map<string, Buffer>();
      for (const sub of touched) this.flush(sub, shared);
    }
  }

  /**
   * Writes what a page gathered for `sub`, unless it was closed or dropped since (a listener), or its
   * byte budget is spent (slow-readers.ts): then nothing of the page is written, and it catches up
   * from before the page once a sweep grants it more, as after a full socket.
   */
  private flush(sub: Subscriber, shared: Map<string, Buffer>): void {
    let chunk: string | Buffer = sub.pending;
    sub.pending = '';
    if (sub.closed) return;
    // Subscribers of one stream handed the same events write one Buffer between them: a page
    // written to 2,000 sockets that keep it unsent is held once, not flattened 2,000 times.
    const first = sub.pendingFirst;
    if (sub.selection === undefined && sub.streams.length === 1 && first !== undefined) {
      const key = sub.named ? `${first.cursor}/` : first.cursor;
      let bytes = shared.get(key);
      if (bytes === undefined) {
        bytes = Buffer.from(chunk);
        shared.set(key, bytes);
      }
      chunk = bytes;
    }
    sub.pendingFirst = undefined;
    if (!this.slow.admit(sub, chunk.length)) {
      sub.cursor = sub.pendingFrom;
      sub.live = false;
      void this.slow.granted(sub).then(() => this.catchUp.run(sub));
      return;
    }
    this.stats.frames += sub.pendingFrames;
    this.stats.delivered++;
    if (!sub.sink.write(chunk)) {
      // Full socket: leave the live set; catch up from the cursor once it drains.
      sub.live = false;
      sub.blockedSince = Date.now();
      void sub.sink.drained().then(() => {
        sub.blockedSince = 0;
        return this.catchUp.run(sub);
      });
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

  /** Ends a slow subscriber here and resets its connection (slow-readers.ts decides which). */
  private drop(sub: Subscriber): void {
    this.stats.dropped++;
    this.unsubscribe(sub);
    if (sub.sink.reset) sub.sink.reset();
    else
      sub.sink.end(
        `retry: ${this.opts.sseRetryMs}\n: slow subscriber dropped; reconnect with Last-Event-ID\n\n`,
      );
  }

  /** Bytes written to subscribers' sockets and not yet taken by them (scrape time only: O(subscribers)). */
  bufferedBytes(): number {
    let n = 0;
    for (const sub of this.all) n += sub.sink.buffered?.() ?? 0;
    return n;
  }

  private beat(): void {
    for (const sub of this.all) if (sub.live) sub.sink.write(':\n\n');
  }

  /** Ends every subscriber with `chunk` (e.g. a `retry:` hint at shutdown). */
  close(chunk?: string): void {
    clearInterval(this.heartbeat);
    this.slow.stop();
    for (const sub of [...this.all]) {
      sub.sink.end(chunk);
      this.unsubscribe(sub);
    }
    for (const set of [...this.waiters.values()]) for (const w of [...set]) this.release(w);
  }
}
