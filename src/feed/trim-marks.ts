/**
 * The trim mark as this process knows it: the highest cursor retention has dropped (by this
 * process's janitor or another's). Tail pages bring the mark of their own snapshot; a reader about to
 * be served from the tailer's window asks for a fresh one (`current()`), because the window may still
 * hold events retention has dropped, and a cursor below the mark must get the same `reset` from every
 * instance.
 *
 * Lifecycle: one per tailer; nothing to start or stop. Fresh reads are shared: callers that arrive
 * while one is in flight wait for the next one (which starts when that one ends), so a burst of
 * catch-ups costs two one-row queries, not one each. Failure: a failed read fails the callers that
 * waited for it (their catch-up read fails) and the next caller reads again.
 */
import type { Db } from '../db/database.ts';
import { type Cursor, START, maxCursor } from './cursor.ts';
import { readTrimMark } from './queries/trim-mark.ts';

export class TrimMarks {
  private highest: Cursor = START;
  /** The read in flight, and the one queued behind it (see current). */
  private inFlight: Promise<Cursor> | undefined;
  private queued: Promise<Cursor> | undefined;

  constructor(private readonly db: Db) {}

  /** The highest trim mark seen (retention dropped every event at or before it). */
  get mark(): Cursor {
    return this.highest;
  }

  /** A mark read elsewhere (a tail page's, from its own snapshot). */
  saw(mark: Cursor): void {
    this.highest = maxCursor(this.highest, mark);
  }

  /** The trim mark as of now: from a read that started after the call. */
  current(): Promise<Cursor> {
    if (this.queued) return this.queued;
    if (!this.inFlight) return this.start();
    // Queued: it starts when the read in flight (which began before this caller) ends.
    const startQueued = () => {
      this.queued = undefined;
      return this.start();
    };
    this.queued = this.inFlight.then(startQueued, startQueued);
    return this.queued;
  }

  private start(): Promise<Cursor> {
    const p = readTrimMark(this.db).then((r) => {
      this.saw(r.mark);
      return this.highest;
    });
    this.inFlight = p;
    const done = () => {
      if (this.inFlight === p) this.inFlight = undefined;
    };
    void p.then(done, done);
    return p;
  }
}
