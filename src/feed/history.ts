/**
 * Which history a cursor belongs to. A client's cursor may name a position this feed never reached:
 * the database was restored from a backup, dropped and recreated, or the client was pointed at
 * another server. Read as a position here, such a cursor stalls silently (nothing is ever after it)
 * or skips events. Two checks tell it apart (`check`):
 * - foreign: its tag is not this feed's (cursor.ts: the tag comes from the epoch created with the
 *   schema, so another database, or this one recreated, has another);
 * - ahead: it is past everything this feed has committed: its txid was never assigned (beyond the
 *   snapshot's xmax; a horizon cursor `(xmax, 0)` is still fine, as `latest` and an empty page's
 *   `next` mint those) or its id was never handed out by the feed's sequence. This catches a restore
 *   from a backup (same epoch, shorter history) and untagged cursors from elsewhere that run ahead.
 * Every cursor this feed mints passes both: event cursors are rows it committed, horizon cursors
 * `(xmin, 0)` are at most xmax, trim marks are event cursors.
 *
 * Lifecycle: one per tailer; `start()` reads the epoch (before any cursor is minted) and a first
 * bound. The bound (xmax, last id) only grows within one history, so a cursor within the last bound
 * read is known good without a query; it is trusted for BOUND_TRUST_MS, after which a check reads it
 * again. A cursor past it waits for a read that started after the check began (shared by concurrent
 * checks, as TrimMarks shares its reads), so a cursor minted a moment ago by another process is never
 * called ahead. Failure: a read that fails because the database is unreachable still passes a cursor
 * this process already knows — within the last bound read, or at or before a position the tailer
 * handed on (`reached`: the reconnecting subscriber's last id is one) — because the trust expires to
 * notice a history replaced under a running process, and an outage is not that (a replaced history
 * is noticed by the first read once it answers); any other cursor's check fails (an SSE stream
 * decides it in-band once the database is back, src/http/feed-sse.ts; a JSON read answers 503), and
 * the next check reads again.
 */
import { isUnavailable } from '../db/commit-outcome.ts';
import type { Db } from '../db/database.ts';
import { type Cursor, type GivenCursor, epochTag, tagCursorText, tagSuffix } from './cursor.ts';
import type { AppendResult } from './queries/append.ts';
import { type CommittedBound, readCommittedBound } from './queries/committed-bound.ts';
import { readFeedEpoch } from './queries/feed-epoch.ts';

/** Why a cursor is not a position of this feed. */
export type NotInFeed = 'ahead' | 'foreign';

/** How long a bound read stays trusted for cursors within it (a history replaced under a running
 * process is noticed within this). */
const BOUND_TRUST_MS = 5000;

export class FeedHistory {
  private ownTag = '';
  private ownSuffix = '';
  private bound: CommittedBound = { xmax: 0, lastId: 0 };
  private boundAt = 0;
  /** The bound of what the tailer handed on (reached): known good, but not a fresh read. */
  private seen: CommittedBound = { xmax: 0, lastId: 0 };
  private inFlight: Promise<CommittedBound> | undefined;
  private queued: Promise<CommittedBound> | undefined;

  constructor(private readonly db: Db) {}

  /** Reads the feed's epoch (its tag goes on every cursor minted from now on) and a first bound. */
  async start(): Promise<void> {
    this.ownTag = epochTag(await readFeedEpoch(this.db));
    this.ownSuffix = tagSuffix(this.ownTag);
    await this.read();
  }

  /** This feed's tag ('' before start). */
  get tag(): string {
    return this.ownTag;
  }

  /** What follows `<txid>-<id>` in this feed's cursors (`.<tag>`). */
  get suffix(): string {
    return this.ownSuffix;
  }

  /** Append results (their cursors as the group commit's SQL functions return them, untagged: see
   * src/sql/cursor-suffix.sql) with this feed's tag. */
  tagged(results: AppendResult[]): AppendResult[] {
    for (const r of results) r.id = tagCursorText(r.id, this.ownTag);
    return results;
  }

  /** Undefined when `c` may be a position of this feed; else why it is not. */
  async check(c: GivenCursor): Promise<NotInFeed | undefined> {
    if (c.tag !== undefined && c.tag !== this.ownTag) return 'foreign';
    if (within(c, this.bound) && Date.now() - this.boundAt < BOUND_TRUST_MS) return undefined;
    try {
      return within(c, await this.fresh()) ? undefined : 'ahead';
    } catch (err) {
      // Unreachable is not replaced: what this process knew before the outage still holds.
      if (isUnavailable(err) && (within(c, this.bound) || within(c, this.seen))) return undefined;
      throw err;
    }
  }

  /** The tailer handed on `events` (rows of this history) and moved its tail to `tail`. */
  reached(tail: Cursor, events: readonly Cursor[]): void {
    let lastId = this.seen.lastId;
    for (const e of events) if (e.id > lastId) lastId = e.id;
    // A horizon `(xmin, 0)` is itself a position within; a row's txid was assigned, so xmax is past it.
    const xmax = Math.max(this.seen.xmax, tail.id === 0 ? tail.txid : tail.txid + 1);
    this.seen = { xmax, lastId };
  }

  /** The bound from a read that started after the call (shared: see the header). */
  private fresh(): Promise<CommittedBound> {
    if (this.queued) return this.queued;
    if (!this.inFlight) return this.read();
    const startQueued = () => {
      this.queued = undefined;
      return this.read();
    };
    this.queued = this.inFlight.then(startQueued, startQueued);
    return this.queued;
  }

  private read(): Promise<CommittedBound> {
    const startedAt = Date.now();
    const p = readCommittedBound(this.db).then((b) => {
      this.bound = b;
      this.boundAt = startedAt;
      return b;
    });
    this.inFlight = p;
    const done = () => {
      if (this.inFlight === p) this.inFlight = undefined;
    };
    void p.then(done, done);
    return p;
  }
}

/** True when `c` is a position the history up to `b` reaches. */
function within(c: GivenCursor, b: CommittedBound): boolean {
  if (c.id > b.lastId) return false;
  return c.txid < b.xmax || (c.txid === b.xmax && c.id === 0);
}
