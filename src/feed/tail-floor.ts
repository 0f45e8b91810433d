/**
 * The tail floor: a time below which the tailer has read every row, so its tail read can skip the
 * feed's older partitions (why that is safe: TailFloor in queries/read-tail.ts).
 *
 * Lifecycle: one per tailer. When it holds no candidate (at most once a second) it asks for a mark
 * (commitfeed.floor_mark on the primary: a time T and a transaction id X taken after it); a later
 * tail page that reads everything below a horizon past X makes T − margin the floor. A transaction
 * held open holds the horizon, and so the floor, back: the floor only trails. It starts at -Infinity
 * (every partition is read), and returns there when a tail page shows the database's clock went
 * back. A failed mark is asked for again a second later; a restarted process starts from -Infinity.
 * Pages read on a standby pass a candidate like any other (their horizon is the standby's, which
 * counts the primary's unfinished transactions as running) and are filtered by the floor: it is a
 * fact about rows, wherever they are read.
 */
import type { Db } from '../db/database.ts';
import { floorMark } from './queries/floor-mark.ts';
import type { TailFloor } from './queries/read-tail.ts';

/** What the tracker needs of a tail page (see TailPage). */
export interface FloorFacts {
  /** The primary's now() at the read (null on a standby). */
  clockMs: number | null;
  horizon: number;
}

const MARK_EVERY_MS = 1000;

export class TailFloorTracker {
  private atMs = Number.NEGATIVE_INFINITY;
  private candidate: { atMs: number; xid: number } | undefined;
  private clockSeenMs = Number.NEGATIVE_INFINITY;
  private lastMarkAt = Number.NEGATIVE_INFINITY;
  /** Times the floor was dropped because the database's clock went back. */
  resets = 0;

  /** marginMs: 0 turns the floor off. */
  constructor(private readonly marginMs: number) {}

  /** The floor for the next tail read (undefined: none, every partition is read). */
  get floor(): TailFloor | undefined {
    return this.marginMs > 0 ? { atMs: this.atMs, marginMs: this.marginMs } : undefined;
  }

  /** True when a mark should be taken now (none held, none in the last second); `now`: Date.now(). */
  wantsMark(now: number): boolean {
    if (this.marginMs <= 0 || this.candidate !== undefined || now - this.lastMarkAt < MARK_EVERY_MS)
      return false;
    this.lastMarkAt = now;
    return true;
  }

  /**
   * A mark from commitfeed.floor_mark: every transaction with an id before `atMs` has one below `xid`.
   * `resetsBefore`: `resets` when it was asked for; a mark taken before a clock step is dropped.
   */
  offer(mark: { atMs: number; xid: number }, resetsBefore: number): void {
    if (resetsBefore === this.resets) this.candidate ??= mark;
  }

  /**
   * A tail page's facts; `caughtUp`: the page read every row below its horizon (it was not full).
   * Returns true when it dropped the floor because the clock went back.
   */
  observe(page: FloorFacts, caughtUp: boolean): boolean {
    if (this.marginMs <= 0) return false;
    let reset = false;
    if (page.clockMs !== null) {
      // A clock that went back: rows stamped after the step may sit below a floor proved before it.
      // Steps smaller than the margin are covered by it.
      if (page.clockMs < this.clockSeenMs - Math.min(1000, this.marginMs)) {
        this.atMs = Number.NEGATIVE_INFINITY;
        this.candidate = undefined;
        this.clockSeenMs = page.clockMs;
        this.resets++;
        reset = true;
      }
      this.clockSeenMs = Math.max(this.clockSeenMs, page.clockMs);
    }
    if (caughtUp && this.candidate !== undefined && page.horizon > this.candidate.xid) {
      this.atMs = Math.max(this.atMs, this.candidate.atMs - this.marginMs);
      this.candidate = undefined;
    }
    return reset;
  }

  /**
   * After each tail page: notes its facts (observe) and, once it read everything below its horizon,
   * asks for a mark when one is wanted (one query on the primary; a failed one is asked again later).
   */
  pageRead(
    page: FloorFacts,
    caughtUp: boolean,
    db: Db,
    log: { warn(obj: object, msg?: string): void },
  ): void {
    if (this.observe(page, caughtUp)) {
      log.warn(
        { clockMs: page.clockMs },
        "the database's clock went back: tail reads cover every partition until a new floor is established",
      );
    }
    if (!caughtUp || !this.wantsMark(Date.now())) return;
    const resets = this.resets;
    floorMark(db).then(
      (mark) => this.offer(mark, resets),
      (err: Error) => log.warn({ err: err.message }, 'tail floor mark failed; taken again later'),
    );
  }
}
