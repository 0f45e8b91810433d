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
 * losing one costs at most one poll interval, never an event. Most of this process's own group
 * commits need no read at all: their statement shows nothing stands before their rows, and they are
 * handed on from memory as they commit (cleared.ts).
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
 * Readers behind the tail are served by catch-up-reads.ts, from the window when it covers their
 * cursor; the window vouches only for cursors at or past the trim marks it has seen (trim-marks.ts).
 */
import type { Db } from '../db/database.ts';
import { CatchUpReads, type LiveTail } from './catch-up-reads.ts';
import { type ClearProbe, ClearedCommits } from './cleared.ts';
import { type Cursor, START, compareCursors, horizonCursor, maxCursor } from './cursor.ts';
import type { FeedEvent } from './event.ts';
import { FeedHistory } from './history.ts';
import { type OwnWrites, mergeInOrder } from './own-writes.ts';
import { currentHorizon } from './queries/current-horizon.ts';
import { floorParams, readTail } from './queries/read-tail.ts';
import { FeedReads } from './reads.ts';
import { TailFloorTracker } from './tail-floor.ts';
import { TrimMarks } from './trim-marks.ts';
import { Wakes } from './wakes.ts';
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

export class Tailer implements LiveTail {
  private window!: EventWindow;
  /** The window only vouches for cursors at or past this: rows below a trim mark the tailer had not
   * yet read when it learned of it may be gone without ever reaching the window. */
  private coverFloor: Cursor = START;
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
  /** Group commits whose events may go to the hub without a read (cleared.ts). */
  readonly cleared = new ClearedCommits();
  /** When rows first started waiting behind the horizon (0: none waiting). */
  private waitingSince = 0;
  private readonly wakes = new Wakes();
  private readonly reads: FeedReads;
  private readonly marks: TrimMarks;
  /** Catch-up reads (catch-up-reads.ts): events after a cursor, from the window or the table. */
  readonly catchUp: CatchUpReads;
  private readonly floor: TailFloorTracker;
  /** The feed's tag and the check of cursors against this history (history.ts). */
  readonly history: FeedHistory;
  /** fallbackWakes: reads started by the timer (idle poll, re-poll behind the horizon, backoff);
   * deferredWakes: commit wakes deferred while idle; deferredReads: reads their timer started;
   * commitWakes: own group commits that asked for a read (not handed on from memory, cleared.ts). */
  readonly stats = {
    reads: 0,
    events: 0,
    errors: 0,
    lastReadAt: 0,
    fallbackWakes: 0,
    deferredWakes: 0,
    deferredReads: 0,
    commitWakes: 0,
  };

  constructor(
    private readonly db: Db,
    private readonly opts: TailerOptions,
  ) {
    this.reads = opts.reads ?? new FeedReads(db, [], { lagWaitMs: 0, log: opts.log });
    this.marks = new TrimMarks(db);
    this.history = new FeedHistory(db);
    this.catchUp = new CatchUpReads(this, this.reads, this.marks, this.history);
    this.floor = new TailFloorTracker(opts.floorMarginMs ?? 0);
  }

  async start(): Promise<void> {
    await this.history.start();
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
    this.wakes.ask(commit);
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

  /** The question for a group commit to ask in its statement (cleared.ts); undefined when the answer
   * would not be used: nobody waits, reads go to standbys, or the tailer is stopped or failing. */
  clearProbe(): ClearProbe | undefined {
    const own = this.opts.own;
    if (!own || this.stopped || this.errorBackoffMs > 0 || this.reads.configured || this.opts.idle?.())
      return undefined;
    return { after: this.window.tail, txids: own.txids(), floor: floorParams(this.floor.floor) };
  }

  /** After a group commit, with its probe: its events go to the hub from memory, next turn, when its
   * answer allows (cleared.ts); they wait for `othersInFlight` (this process's statements still
   * committing: each calls this again) or for the read in flight (its page first). Otherwise a read. */
  committed(probe: ClearProbe | undefined, othersInFlight: boolean): void {
    if (probe?.answer === undefined || this.stopped) {
      this.stats.commitWakes++;
      this.wake();
      return;
    }
    this.cleared.add(probe.answer, this.window.tail);
    // Next turn: the commit's publishers get their answers first, without waiting for the fan-out.
    this.cleared.later(othersInFlight, (mayRead) => {
      if (!this.handOnCleared() && !this.running && mayRead) this.committed(undefined, false);
    });
  }

  /** Hands on what the answered commits allow; true when none is left waiting. */
  private handOnCleared(): boolean {
    const own = this.opts.own;
    if (this.cleared.size === 0 || !own || this.running || this.stopped) return this.cleared.size === 0;
    const tail = this.window.tail;
    const to = this.cleared.ready(tail, own);
    if (to !== undefined) this.handOn(own.between(own.txids(), tail, to, this.history.suffix), to, true);
    return this.cleared.size === 0;
  }

  /** Puts a page of events (in feed order, all past the tail) into the window and hands it on;
   * `cleared`: the tail moves to a position cleared.ts gave. */
  private handOn(events: FeedEvent[], tail: Cursor, cleared = false): void {
    this.window.append(events, tail);
    this.history.reached(tail, events);
    this.cleared.moved(tail, cleared);
    this.opts.own?.release(tail);
    this.stats.events += events.length;
    if (events.length === 0) return;
    try {
      this.opts.onEvents(events);
    } catch (err) {
      // A failing subscriber fails neither the read nor the process (a hand-on runs in its own turn).
      this.opts.log.warn({ err: (err as Error).message }, 'handing events on failed');
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
        const { covers, woken } = this.wakes.reading();
        const own = this.opts.own;
        const page = await this.reads.tail(woken, (db) =>
          readTail(db, this.window.tail, this.opts.pageSize, own, this.floor.floor, this.history.suffix),
        );
        if (compareCursors(this.window.tail, page.trimMark) < 0) {
          this.coverFloor = maxCursor(this.coverFloor, page.trimMark);
        }
        this.marks.saw(page.trimMark);
        this.stats.reads++;
        this.stats.lastReadAt = Date.now();
        this.errorBackoffMs = 0;
        const rows = page.events;
        const full = rows.length === this.opts.pageSize;
        const horizon = horizonCursor(page.horizon);
        // A full page may have more behind it; otherwise everything below the horizon has been read.
        // (Every row read is from a transaction below the horizon, so the horizon is past them all.)
        const tail = full ? rows[rows.length - 1] : maxCursor(this.window.tail, horizon);
        // This process's own events the page skipped, within the same bounds (own-writes.ts).
        const events =
          own && page.skipped.length > 0
            ? mergeInOrder(rows, own.between(page.skipped, this.window.tail, tail, this.history.suffix))
            : rows;
        this.handOn(events, tail);
        this.floor.pageRead(page, !full, this.db, this.opts.log);
        if (full) continue;
        this.wakes.readUpTo(covers);
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
    // Commits answered clear while this read ran go now; one still waiting for a lower transaction
    // (a statement of this process still committing, or another's) is read for again soon.
    if (!this.handOnCleared() && this.errorBackoffMs === 0) next = Math.min(next, this.fastPollMs);
    // A commit deferred while this read ran (it may have started before the commit) is read later.
    if (this.deferred && this.errorBackoffMs === 0) next = Math.min(next, this.opts.idleDelayMs ?? 0);
    this.schedule(next);
  }

  /** Every local commit's wake was covered by a read that found nothing waiting behind the horizon,
   * and no commit waits to be handed on (cleared.ts): the tail is after every commit so far. */
  get caughtUp(): boolean {
    return this.wakes.allCovered && this.waitingSince === 0 && this.cleared.size === 0;
  }

  /**
   * Resolves once a read that started after every wake asked so far has completed (or after
   * `maxMs`). A hint for tests and tools, not a guarantee: a read can finish with committed rows
   * still behind the horizon (see safe-position.ts for a position that is one).
   */
  settled(maxMs = 1000): Promise<void> {
    if (this.stopped || (this.wakes.allCovered && this.cleared.size === 0)) return Promise.resolve();
    if (this.cleared.size > 0) this.wake(false); // a read hands on the commits waiting in cleared.ts
    this.hurry();
    return this.wakes.covered(maxMs);
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

  /** True when every event after `after` up to the tail is in the window (see coverFloor). */
  inWindow(after: Cursor): boolean {
    return (
      this.window.covers(after) &&
      compareCursors(after, this.coverFloor) >= 0 &&
      compareCursors(after, this.marks.mark) >= 0
    );
  }

  /** Up to `limit` events of `streams` after `after`, from the window (requires inWindow(after)). */
  fromWindow(streams: ReadonlySet<string>, after: Cursor, limit: number): FeedEvent[] {
    return this.window.read(streams, after, limit);
  }
}
