/**
 * The tailer: one per process, the only reader of the global tail. It reads the feed past its
 * cursor, up to the horizon (transactions certainly finished), in pages, into the in-memory window,
 * and hands each page to the hub for fan-out. 10,000 subscribers cost one query per wake. The read
 * skips the rows of this process's own recent commits: own-writes.ts holds those events, and the
 * tailer puts them into the page within the bounds the read establishes (not sent back).
 *
 * Lifecycle: `start()` positions the cursor at the current horizon (history is served by catch-up
 * reads, not replayed into the window); it then wakes on NOTIFY (via the listener), on a local poke
 * after our own commits, on a fallback timer, and on a fast re-poll while committed rows wait behind
 * the horizon (the transaction that finally ends may never notify). A NOTIFY is only a latency hint:
 * losing one costs at most one poll interval, never an event.
 * While nothing in this process waits for new events (`idle()`: no SSE subscriber, long-poll or
 * waiting claim), a commit's wake is deferred up to `idleDelayMs`, so one read covers every commit
 * of that stretch instead of one read per commit (a publish-only process spends most of its
 * database time on reads nobody is waiting for). `hurry()` — someone started waiting — reads at once.
 * Each read skips the feed partitions below the tail floor (tail-floor.ts), a time under which every
 * row has been read; on the primary it runs on its own connection (generic plans, see server.ts).
 * Failure: a failed read (database down) is logged and retried with backoff; the cursor only moves
 * past rows actually handed to the hub, so nothing is skipped when the database comes back.
 * With READ_DATABASE_URL, tail and catch-up reads run on a standby through FeedReads (reads.ts),
 * which makes a woken read wait for the standby's replay and falls back to the primary.
 */
import type { Db } from '../db/database.ts';
import { type Cursor, START, compareCursors, horizonCursor, maxCursor } from './cursor.ts';
import { framerFor } from './frames.ts';
import type { FeedEvent } from './event.ts';
import { type OwnWrites, mergeInOrder } from './own-writes.ts';
import { currentHorizon } from './queries/current-horizon.ts';
import { floorMark } from './queries/floor-mark.ts';
import { readRange } from './queries/read-range.ts';
import { readRangeFrames } from './queries/read-range-frames.ts';
import { readTail } from './queries/read-tail.ts';
import { readStartPosition } from './queries/start-position.ts';
import { readTrimMark } from './queries/trim-mark.ts';
import { FeedReads } from './reads.ts';
import { TailFloorTracker } from './tail-floor.ts';
import { EventWindow } from './window.ts';

export interface TailerOptions {
  pageSize: number;
  windowEvents: number;
  pollIntervalMs: number;
  log: { warn(obj: object, msg?: string): void; info(obj: object, msg?: string): void };
  /** Receives each page of new events (already in the window) in feed order. */
  onEvents(events: readonly FeedEvent[]): void;
  /** Where tail and catch-up reads run (standbys, see reads.ts); default: `db` itself. */
  reads?: FeedReads;
  /** This process's recent commits, which the tail read need not send back (see own-writes.ts). */
  own?: OwnWrites;
  /** True while nobody in this process waits for new events: commit wakes may then be deferred. */
  idle?: () => boolean;
  /** Longest a commit's wake is deferred while idle (0: never deferred). */
  idleDelayMs?: number;
  /** The tail floor's margin (see tail-floor.ts; 0 or absent: no floor, every partition is read). */
  floorMarginMs?: number;
}

const FAST_POLL_MIN_MS = 2;
const FAST_POLL_MAX_MS = 100;
const ERROR_BACKOFF_MAX_MS = 5000;

export class Tailer {
  private window!: EventWindow;
  /** The window only vouches for cursors at or past this: rows below a trim mark the tailer had not
   * yet read when it learned of it may be gone without ever reaching the window. */
  private coverFloor: Cursor = START;
  /** The highest trim mark seen (retention dropped every event at or before it). */
  private trimMark: Cursor = START;
  /** The trim-mark read in flight, and the one queued behind it (see currentTrimMark). */
  private markRead: Promise<Cursor> | undefined;
  private markNext: Promise<Cursor> | undefined;
  private running = false;
  private again = false;
  private stopped = true;
  private timer: NodeJS.Timeout | undefined;
  /** When the timer fires (epoch ms; infinite: none set). */
  private timerAt = Number.POSITIVE_INFINITY;
  /** A commit wake was deferred (idle) and no read has started since. */
  private deferred = false;
  private fastPollMs = FAST_POLL_MIN_MS;
  private errorBackoffMs = 0;
  /** When rows first started waiting behind the horizon (0: none waiting). */
  private waitingSince = 0;
  /** Wakes asked for, and the last one a completed read is known to cover (see settled()). */
  private wakesRequested = 0;
  private wakesCovered = 0;
  private settleWaiters: { target: number; resolve: () => void }[] = [];
  /** Wakes from a commit (NOTIFY, local poke), and those the last read started after (see FeedReads.tail). */
  private commitWakes = 0;
  private commitWakesRead = 0;
  private readonly reads: FeedReads;
  private readonly floor: TailFloorTracker;
  /** fallbackWakes: reads started by the timer (idle poll, re-poll behind the horizon, backoff);
   * deferredWakes: commit wakes deferred while idle; deferredReads: reads their timer started. */
  readonly stats = {
    reads: 0,
    events: 0,
    errors: 0,
    lastReadAt: 0,
    fallbackWakes: 0,
    deferredWakes: 0,
    deferredReads: 0,
  };

  constructor(
    private readonly db: Db,
    private readonly opts: TailerOptions,
  ) {
    this.reads = opts.reads ?? new FeedReads(db, [], { lagWaitMs: 0, log: opts.log });
    this.floor = new TailFloorTracker(opts.floorMarginMs ?? 0);
  }

  async start(): Promise<void> {
    this.window = new EventWindow(await currentHorizon(this.db), this.opts.windowEvents);
    this.stopped = false;
    this.schedule(this.opts.pollIntervalMs);
  }

  stop(): void {
    this.stopped = true;
    this.clearTimer();
  }

  /** The position up to which every finished event has been read (the live tail). */
  get position(): Cursor {
    return this.window.tail;
  }

  get ready(): boolean {
    return !this.stopped && this.errorBackoffMs === 0;
  }

  /** The tail floor (epoch ms; -Infinity: none yet, every partition is read): see tail-floor.ts. */
  get floorAtMs(): number {
    return this.floor.floor?.atMs ?? Number.NEGATIVE_INFINITY;
  }

  /** Milliseconds committed rows have been waiting behind the horizon (0 when none are). */
  get horizonStallMs(): number {
    return this.waitingSince === 0 ? 0 : Date.now() - this.waitingSince;
  }

  /** Asks for a read soon; cheap to call often (wakes coalesce into one read). `commit`: false for
   * the tailer's own timer (nothing says a commit happened). */
  wake(commit = true): void {
    this.wakesRequested++;
    if (commit) this.commitWakes++;
    if (this.stopped) return;
    const delay = this.opts.idleDelayMs ?? 0;
    if (commit && delay > 0 && this.opts.idle?.()) {
      // Nobody waits: read once `delay` from now (or when a read already due sooner runs).
      this.deferred = true;
      this.stats.deferredWakes++;
      if (!this.running && this.timerAt > Date.now() + delay) this.schedule(delay);
      return;
    }
    this.readNow();
  }

  /** Takes a mark for the tail floor (one query on the primary); a failed one is taken again later. */
  private async markFloor(): Promise<void> {
    const resets = this.floor.resets;
    try {
      this.floor.offer(await floorMark(this.db), resets);
    } catch (err) {
      this.opts.log.warn({ err: (err as Error).message }, 'tail floor mark failed; taken again later');
    }
  }

  /** Someone started waiting for new events: a deferred read runs now. */
  hurry(): void {
    if (this.deferred && !this.stopped) this.readNow();
  }

  private readNow(): void {
    if (this.running) {
      this.again = true;
      return;
    }
    this.clearTimer();
    void this.run();
  }

  private async run(): Promise<void> {
    this.running = true;
    let next = this.opts.pollIntervalMs;
    try {
      for (;;) {
        this.again = false;
        this.deferred = false;
        const covers = this.wakesRequested;
        const woken = this.commitWakes !== this.commitWakesRead;
        this.commitWakesRead = this.commitWakes;
        const page = await this.reads.tail(woken, (db) =>
          readTail(db, this.window.tail, this.opts.pageSize, this.opts.own, this.floor.floor),
        );
        if (compareCursors(this.window.tail, page.trimMark) < 0) {
          this.coverFloor = maxCursor(this.coverFloor, page.trimMark);
        }
        this.trimMark = maxCursor(this.trimMark, page.trimMark);
        this.stats.reads++;
        this.stats.lastReadAt = Date.now();
        this.errorBackoffMs = 0;
        const rows = page.events;
        const full = rows.length === this.opts.pageSize;
        const horizon = horizonCursor(page.horizon);
        // A full page may have more behind it; otherwise everything below the horizon has been read.
        // (Every row read is from a transaction below the horizon, so the horizon is past them all.)
        const tail = full ? rows[rows.length - 1] : maxOf(this.window.tail, horizon);
        // This process's own events the page skipped, within the same bounds (own-writes.ts).
        const own = this.opts.own;
        const events =
          own && page.skipped.length > 0
            ? mergeInOrder(rows, own.between(page.skipped, this.window.tail, tail))
            : rows;
        this.window.append(events, tail);
        own?.release(tail);
        if (this.floor.observe(page, !full)) {
          this.opts.log.warn(
            { clockMs: page.clockMs },
            "the database's clock went back: tail reads cover every partition until a new floor is established",
          );
        }
        if (!full && this.floor.wantsMark(Date.now())) void this.markFloor();
        this.stats.events += events.length;
        if (events.length > 0) this.opts.onEvents(events);
        if (full) continue;
        this.wakesCovered = covers;
        this.releaseSettled();
        if (page.waiting) {
          if (this.waitingSince === 0) this.waitingSince = Date.now();
          next = this.fastPollMs;
          this.fastPollMs = Math.min(this.fastPollMs * 2, FAST_POLL_MAX_MS);
        } else {
          this.waitingSince = 0;
          this.fastPollMs = FAST_POLL_MIN_MS;
        }
        if (!this.again || this.stopped) break;
      }
    } catch (err) {
      this.stats.errors++;
      this.errorBackoffMs = Math.min(Math.max(this.errorBackoffMs * 2, 100), ERROR_BACKOFF_MAX_MS);
      next = this.errorBackoffMs;
      this.opts.log.warn({ err: (err as Error).message, retryInMs: next }, 'feed read failed');
    } finally {
      this.running = false;
    }
    // A commit deferred while this read ran (it may have started before the commit) is read later.
    if (this.deferred && this.errorBackoffMs === 0) next = Math.min(next, this.opts.idleDelayMs ?? 0);
    this.schedule(next);
  }

  /**
   * A position after every event committed before the call and not past the horizon: where a
   * `latest` reader starts (it must not receive what was acknowledged before it connected, nor miss
   * what commits after), and how far a read-your-writes read must reach. Undefined when no such
   * position can be had within `maxMs` (a transaction holding the horizon back behind committed
   * rows): the caller answers 503 rather than start in the past.
   *
   * The tail itself when the last read started after every local commit and found nothing waiting
   * behind the horizon; otherwise the horizon read in one statement with the check that no committed
   * row is past it (queries/start-position.ts), so a tailer that is merely behind costs one query, not a wait.
   * A position past the tail is fine for a subscriber: the hub skips events at or before its cursor.
   */
  async safePosition(maxMs: number): Promise<Cursor | undefined> {
    if (this.wakesCovered >= this.wakesRequested && this.waitingSince === 0) return this.window.tail;
    const deadline = Date.now() + maxMs;
    for (let pause = 5; ; pause = Math.min(pause * 2, 100)) {
      const { horizon, waiting } = await readStartPosition(this.db);
      if (!waiting) return maxCursor(this.window.tail, horizon);
      const left = deadline - Date.now();
      if (left <= 0) return undefined;
      await new Promise((r) => setTimeout(r, Math.min(pause, left)));
    }
  }

  /**
   * Resolves once a read that started after every wake asked so far has completed (or after
   * `maxMs`). A hint for tests and tools, not a guarantee: a read can finish with committed rows
   * still behind the horizon (see safePosition for a position that is one).
   */
  settled(maxMs = 1000): Promise<void> {
    if (this.wakesCovered >= this.wakesRequested || this.stopped) return Promise.resolve();
    this.hurry();
    return new Promise((resolve) => {
      const w = { target: this.wakesRequested, resolve };
      this.settleWaiters.push(w);
      setTimeout(() => {
        this.settleWaiters = this.settleWaiters.filter((x) => x !== w);
        resolve();
      }, maxMs).unref();
    });
  }

  private releaseSettled(): void {
    if (this.settleWaiters.length === 0) return;
    const still: typeof this.settleWaiters = [];
    for (const w of this.settleWaiters) {
      if (w.target <= this.wakesCovered) w.resolve();
      else still.push(w);
    }
    this.settleWaiters = still;
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    clearTimeout(this.timer);
    this.timerAt = Date.now() + ms;
    this.timer = setTimeout(() => {
      this.timerAt = Number.POSITIVE_INFINITY;
      // A deferred commit's read is a commit's read (it waits for standbys' replay), not a fallback.
      if (this.deferred) {
        this.stats.deferredReads++;
        this.readNow();
      } else {
        this.stats.fallbackWakes++;
        this.wake(false);
      }
    }, ms);
    this.timer.unref();
  }

  private clearTimer(): void {
    clearTimeout(this.timer);
    this.timerAt = Number.POSITIVE_INFINITY;
  }

  /**
   * Up to `limit` events of `streams` after `after`, from the window when it covers the cursor,
   * else from the table; never past the tail (or `reach`), so every event returned is final. `position` is where
   * the next read continues: the last event returned, or the tail when nothing else matched.
   *
   * `reset` (with no events): `after` is below the trim mark, so retention may have dropped events
   * this reader never saw. The reader must say so in-band before anything else (an SSE `reset`
   * frame, a `reset` property in JSON) and continue from `position`, the trim mark. A cursor the
   * window covers needs no check: every event after it is in memory.
   */
  async read(
    streams: readonly string[],
    streamSet: ReadonlySet<string>,
    after: Cursor,
    limit: number,
    reach?: Cursor,
  ): Promise<{ events: FeedEvent[]; position: Cursor; reset?: Cursor }> {
    // `reach` (from safePosition) may be past the tail: that stretch is final but not yet in memory.
    const limitOf = () => (reach === undefined ? this.window.tail : maxCursor(this.window.tail, reach));
    if (compareCursors(after, limitOf()) >= 0) return { events: [], position: after };
    let fromWindow = this.inWindow(after);
    if (fromWindow) fromWindow = compareCursors(after, await this.currentTrimMark()) >= 0;
    // Taken after the await, in the same tick as the window read: the window may have grown meanwhile.
    const upTo = limitOf();
    let events: FeedEvent[];
    if (fromWindow && this.inWindow(after) && compareCursors(upTo, this.window.tail) === 0) {
      events = this.window.read(streamSet, after, limit);
    } else {
      const range = await this.reads.range(upTo, (db) => readRange(db, streams, after, upTo, limit));
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
  ): Promise<{ chunks: string[]; count: number; position: Cursor; more: boolean; reset?: Cursor }> {
    const upTo = this.window.tail;
    if (compareCursors(after, upTo) >= 0) return { chunks: [], count: 0, position: after, more: false };
    if (!this.inWindow(after)) {
      const page = await this.reads.range(upTo, (db) =>
        readRangeFrames(db, streams, after, upTo, limit, chunkBytes),
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
    const chunks: string[] = [];
    const frameOf = framerFor(streams);
    let chunk = '';
    for (const e of events) {
      const frame = frameOf(e);
      if (chunk.length + frame.length > chunkBytes && chunk !== '') {
        chunks.push(chunk);
        chunk = '';
      }
      chunk += frame;
    }
    if (chunk !== '') chunks.push(chunk);
    return { chunks, count: events.length, position, more: events.length === limit };
  }

  /**
   * The trim mark as of now. The window may still hold events retention has dropped (by this
   * process's janitor or another's); a cursor below the mark must get the same `reset` from every
   * instance, so the window serves only cursors at or past a mark read after the request began.
   * Reads are shared: callers that arrive while one is in flight wait for the next one, so a burst
   * of catch-ups costs two one-row queries, not one each.
   */
  private currentTrimMark(): Promise<Cursor> {
    if (this.markNext) return this.markNext;
    const start = (): Promise<Cursor> => {
      const p = readTrimMark(this.db).then((r) => {
        this.trimMark = maxCursor(this.trimMark, r.mark);
        return this.trimMark;
      });
      this.markRead = p;
      void p.then(
        () => {
          if (this.markRead === p) this.markRead = undefined;
        },
        () => {
          if (this.markRead === p) this.markRead = undefined;
        },
      );
      return p;
    };
    if (!this.markRead) return start();
    // Queued: it starts when the read in flight (which began before this caller) ends.
    const startQueued = () => {
      this.markNext = undefined;
      return start();
    };
    const next = this.markRead.then(startQueued, startQueued);
    this.markNext = next;
    return next;
  }

  /** True when retention may have dropped events after `after` (a fresh, shared trim-mark read). */
  async isBelowTrimMark(after: Cursor): Promise<boolean> {
    return compareCursors(after, await this.currentTrimMark()) < 0;
  }

  /** True when every event after `after` up to the tail is in the window (see coverFloor). */
  private inWindow(after: Cursor): boolean {
    return (
      this.window.covers(after) &&
      compareCursors(after, this.coverFloor) >= 0 &&
      compareCursors(after, this.trimMark) >= 0
    );
  }
}

function maxOf(a: Cursor, b: Cursor): Cursor {
  return compareCursors(a, b) >= 0 ? a : b;
}
