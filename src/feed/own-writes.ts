/**
 * The events this process has just committed through its group commit, kept until the tailer has
 * read past them, so that the tail read need not send them back: it skips the rows of these
 * transactions and the tailer puts the events in from here, in feed order, within the same bounds
 * the read gives every other row (after the tailer's position, up to the tail the read establishes:
 * the horizon, or the last row of a full page). Which events exist and where they stand is still
 * the feed's: a transaction is recorded only after its commit returned, so its rows are committed,
 * and the horizon decides when they are final, exactly as for rows read from the table. Measured
 * before this: reading back every event written was ~40% of the server's CPU per event of a
 * batched publish (bench/HISTORY.md, "Hot path, round four").
 *
 * Lifecycle: the group commit records each committed statement (its transaction id, the new ids in
 * input order, the one created_at time of its rows, and the events) before it wakes the tailer.
 * Each tail read sends the recorded transaction ids, and only events of those transactions are
 * taken from here for that read (`between`): a transaction recorded while a read was in flight was
 * not skipped by it, so its rows came from the table. After each read the tailer releases the
 * transactions it has read past.
 * Failure: nothing here touches the database. A commit whose outcome is unknown (connection lost)
 * is not recorded, so its rows are read from the table; so are events committed outside the group
 * commit (/v1/tx, the SQL functions, other processes) and groups with keys. If transactions wait
 * behind the horizon for long (a long-running transaction elsewhere), recording stops at
 * `maxEvents` held events and later commits are read from the table until the tailer catches up.
 */
import { type Cursor, compareCursors } from './cursor.ts';
import type { EventFields, FeedEvent } from './event.ts';
import { eventAt } from './event.ts';

interface Written {
  tx: string;
  txid: number;
  /** Ascending (ids are taken in input order). */
  ids: number[];
  events: readonly EventFields[];
  ms: number;
}

export class OwnWrites {
  private readonly txs = new Map<string, Written>();
  private held = 0;
  /** recorded/skipped: events kept, and events not kept because `maxEvents` were held already. */
  readonly stats = { recorded: 0, skipped: 0 };

  constructor(private readonly maxEvents: number) {}

  /** Keeps one committed statement's events: transaction `tx`, `ids[i]` is `events[i]`'s row.
   * False when they were not kept (`maxEvents` held already): they must be read from the table. */
  record(tx: string, ids: number[], events: readonly EventFields[], ms: number): boolean {
    if (this.held + events.length > this.maxEvents) {
      this.stats.skipped += events.length;
      return false;
    }
    this.txs.set(tx, { tx, txid: Number(tx), ids, events, ms });
    this.held += events.length;
    this.stats.recorded += events.length;
    return true;
  }

  /** True when transaction `txid`'s events are held here. */
  holds(txid: number): boolean {
    return this.txs.has(String(txid));
  }

  /** The transactions the next tail read skips (xid8 texts); pass the same list to between(). */
  txids(): string[] {
    return [...this.txs.keys()];
  }

  /** The held events of the transactions in `txids` in (after, upTo], in feed order; `suffix`: the
   * feed's tag as their cursors end. */
  between(txids: readonly string[], after: Cursor, upTo: Cursor, suffix = ''): FeedEvent[] {
    const out: FeedEvent[] = [];
    const listed = txids
      .map((tx) => this.txs.get(tx))
      .filter((w): w is Written => w !== undefined && w.txid >= after.txid && w.txid <= upTo.txid)
      .sort((a, b) => a.txid - b.txid);
    for (const w of listed) {
      // The ids ascend: skip those at or before `after` from the front and those past `upTo` from the
      // back (mostly none: a transaction lies wholly inside), with no comparison per event between.
      const { txid, ids } = w;
      let i = 0;
      while (i < ids.length && compareAt(txid, ids[i], after) <= 0) i++;
      let end = ids.length;
      while (end > i && compareAt(txid, ids[end - 1], upTo) > 0) end--;
      const prefix = `${w.tx}-`;
      for (; i < end; i++) out.push(eventAt(txid, ids[i], prefix + ids[i] + suffix, w.events[i], w.ms));
    }
    return out;
  }

  /** Forgets every transaction the tailer has read past (`tail`). */
  release(tail: Cursor): void {
    if (this.txs.size === 0) return;
    for (const [tx, w] of this.txs) {
      const last = { txid: w.txid, id: w.ids[w.ids.length - 1] };
      if (compareCursors(last, tail) <= 0) {
        this.held -= w.events.length;
        this.txs.delete(tx);
      }
    }
  }

  /** Events held now. */
  get size(): number {
    return this.held;
  }
}

/** compareCursors((txid, id), c) without making the pair. */
function compareAt(txid: number, id: number, c: Cursor): number {
  if (txid !== c.txid) return txid < c.txid ? -1 : 1;
  return id < c.id ? -1 : id > c.id ? 1 : 0;
}

/** Merges two lists each in feed order into one. */
export function mergeInOrder(a: FeedEvent[], b: FeedEvent[]): FeedEvent[] {
  if (b.length === 0) return a;
  if (a.length === 0) return b;
  const out: FeedEvent[] = new Array(a.length + b.length);
  let i = 0;
  let j = 0;
  let k = 0;
  while (i < a.length && j < b.length) out[k++] = compareCursors(a[i], b[j]) < 0 ? a[i++] : b[j++];
  while (i < a.length) out[k++] = a[i++];
  while (j < b.length) out[k++] = b[j++];
  return out;
}
