/**
 * Commits handed on from memory: a group commit's events go to subscribers the moment it commits,
 * without the tail read that would otherwise follow (a wake and a database round trip later), when
 * its own statement showed that nothing stands before its rows that the tailer lacks.
 *
 * How: when a group commit starts, the tailer gives it a question (ClearProbe: the tailer's
 * position and the transactions own-writes.ts holds). The statement asks commitfeed.tail_clear
 * (src/sql/tail-clear.sql) after its insert, with a snapshot taken after it has its transaction id:
 * which transactions with lower ids may still be running, and which finished ones left rows past
 * the position that are not held. No transaction can take a lower id later, so once each of those
 * is behind the tailer or is one of this process's own statements that has committed (held), the
 * feed up to the statement's last row is exactly the window plus the held events: the tailer hands
 * them on in feed order, as a read would have. Usually the answer is empty, or names only this
 * process's statement committing beside it.
 *
 * Lifecycle: one per tailer. Answers wait here (`add`) until `ready` finds the tail may move to one
 * of them, or a read passes them (`moved` drops those). Failure: an answer whose transactions never
 * resolve here (another process's transaction still open, a statement that failed) just waits: the
 * tailer reads instead, so it costs the read this path saves. Only held events are ever handed on
 * (own-writes.ts may keep none past its cap; the append then gives no answer), and none past a trim
 * mark the tailer has not read (tail_clear gives no answer). Not used while reads go to standbys
 * (an event must not reach readers before the standbys that serve their reconnections) or while
 * nobody waits for events (the tailer defers its reads then).
 */
import { type Cursor, compareCursors } from './cursor.ts';
import type { OwnWrites } from './own-writes.ts';

/** The tailer's question to one group commit (see above); the append sets `answer`. */
export interface ClearProbe {
  /** The tailer's position when the write started. */
  after: Cursor;
  /** The transactions own-writes held then (not counted as standing before the statement). */
  txids: string[];
  /** The tail floor as the statement's parameters (readTail's floorParams). */
  floor: [string, string];
  /** Unset, and the tailer reads instead, when the statement could not tell (too many transactions to
   * look at, a trim mark past the position) or its events were not held. */
  answer?: ClearAnswer;
}

export interface ClearAnswer {
  /** The transactions that stand before the statement's rows (see above). */
  needs: number[];
  /** The statement's last row. */
  to: Cursor;
}

export class ClearedCommits {
  private waiting: ClearAnswer[] = [];
  /** Every row of the tail's transaction is in the window: the tail was moved here, to a `to`. */
  private tailWhole = false;
  /** Commits handed on from here. */
  handedOn = 0;
  private due = false;
  private mayRead = false;

  /** Calls `handOn` once, next turn, for all the answers added before it runs; `mayRead`: false while
   * every commit that asked had a statement of this process in flight beside it (each of those calls
   * this again when it commits; one that fails asks for a read itself). */
  later(othersInFlight: boolean, handOn: (mayRead: boolean) => void): void {
    this.mayRead ||= !othersInFlight;
    if (this.due) return;
    this.due = true;
    setImmediate(() => {
      const mayRead = this.mayRead;
      this.due = false;
      this.mayRead = false;
      handOn(mayRead);
    });
  }

  /** Keeps an answer until it is handed on or passed (none kept when `tail` is past it already). */
  add(answer: ClearAnswer, tail: Cursor): void {
    if (compareCursors(answer.to, tail) > 0) this.waiting.push(answer);
  }

  get size(): number {
    return this.waiting.length;
  }

  /** The furthest position the tail may move to now, every event up to it being in the window or
   * held by `own` (undefined: none). */
  ready(tail: Cursor, own: OwnWrites): Cursor | undefined {
    let to: Cursor | undefined;
    const past = (x: number) => x < tail.txid || (x === tail.txid && this.tailWhole) || own.holds(x);
    for (const c of this.waiting) {
      if (compareCursors(c.to, tail) <= 0 || (to !== undefined && compareCursors(c.to, to) <= 0)) continue;
      // Its own events must be held too (the append answers only then; checked again here).
      if (own.holds(c.to.txid) && c.needs.every(past)) to = c.to;
    }
    return to;
  }

  /** The tail moved to `tail`; `fromHere`: to a position `ready` gave (else a read moved it). */
  moved(tail: Cursor, fromHere: boolean): void {
    this.tailWhole = fromHere;
    if (this.waiting.length === 0) return;
    const left = this.waiting.filter((c) => compareCursors(c.to, tail) > 0);
    if (fromHere) this.handedOn += this.waiting.length - left.length;
    this.waiting = left;
  }
}
