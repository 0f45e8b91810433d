/**
 * The events this process has just committed, kept until the tailer has read past them, so that the
 * tail read need not send their contents back: it returns their position (txid, id) and time only,
 * and the tailer takes stream, type, key and data from here. The feed stays the truth for which
 * events exist and in what order (the read still returns every row, horizon and page rules
 * unchanged); only the bytes this process already holds stop making the round trip. Measured before
 * this: reading back every event written was ~40% of the server's CPU per event of a batched publish
 * and most of PostgreSQL's tail-read time (bench/RESULTS.md, "Hot path, round four").
 *
 * Lifecycle: the group commit records each committed statement's events (keyed by the transaction
 * id in their cursors) before it wakes the tailer; every tail read sends the recorded transaction
 * ids and fills in the rows that come back without contents; after each read the tailer releases
 * the transactions it has read past. Events committed outside the group commit (/v1/tx, the SQL
 * functions, other processes) are never recorded and come back whole.
 * Failure: nothing here touches the database. A commit whose outcome is unknown (connection lost)
 * is not recorded, so its rows are read back in full. If a transaction's rows sit behind the
 * horizon for long (a long-running transaction elsewhere), recording stops at `maxEvents` held
 * events and later commits are read back in full until the tailer catches up. A row that comes
 * back without contents and is not held here would be a bug: the read is repeated in full.
 */
import type { Cursor } from './cursor.ts';
import type { AppendResult } from './queries.ts';
import type { EventInput } from './event.ts';

interface Written {
  txid: number;
  /** The highest id the transaction wrote: once the tailer is past (txid, lastId), it is released. */
  lastId: number;
  byId: Map<number, EventInput>;
}

export class OwnWrites {
  private readonly txs = new Map<string, Written>();
  private held = 0;
  /** recorded/skipped: events kept, and events not kept because `maxEvents` were held already. */
  readonly stats = { recorded: 0, skipped: 0 };

  constructor(private readonly maxEvents: number) {}

  /** Keeps a committed statement's events (results in the same order; duplicates wrote no row). */
  record(events: readonly EventInput[], results: readonly AppendResult[]): void {
    if (this.held + events.length > this.maxEvents) {
      this.stats.skipped += events.length;
      return;
    }
    for (let i = 0; i < results.length; i++) {
      const r = results[i];
      if (r.duplicate) continue;
      const dash = r.id.indexOf('-');
      const tx = r.id.slice(0, dash);
      const id = Number(r.id.slice(dash + 1));
      let w = this.txs.get(tx);
      if (w === undefined) {
        w = { txid: Number(tx), lastId: 0, byId: new Map() };
        this.txs.set(tx, w);
      }
      w.byId.set(id, events[i]);
      if (id > w.lastId) w.lastId = id;
      this.held++;
      this.stats.recorded++;
    }
  }

  /** The transactions whose rows the next tail read may return without contents (xid8 texts). */
  txids(): string[] {
    return [...this.txs.keys()];
  }

  /** The event this process wrote at (txid, id), if it is held. */
  get(txid: string, id: number): EventInput | undefined {
    return this.txs.get(txid)?.byId.get(id);
  }

  /** Forgets every transaction the tailer has read past (`tail`). */
  release(tail: Cursor): void {
    if (this.txs.size === 0) return;
    for (const [tx, w] of this.txs) {
      if (w.txid < tail.txid || (w.txid === tail.txid && w.lastId <= tail.id)) {
        this.held -= w.byId.size;
        this.txs.delete(tx);
      }
    }
  }

  /** Events held now. */
  get size(): number {
    return this.held;
  }
}
