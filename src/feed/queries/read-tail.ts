/**
 * The tail read: the next page of the whole feed past the tailer's cursor, from finished
 * transactions only, with the facts the tailer needs from the same snapshot (the horizon, whether
 * rows wait behind it, the trim mark, the primary's clock).
 */
import { CompiledQuery } from 'kysely';
import type { Db } from '../../db/database.ts';
import { prepared } from '../../db/prepared.ts';
import type { Cursor } from '../cursor.ts';
import type { FeedEvent } from '../event.ts';
import type { OwnWrites } from '../own-writes.ts';
import { EVENT_COLUMNS, PAGE_COLUMNS, type Row, toEvent } from './event-columns.ts';
import { trimMarkOf } from './marked-page.ts';

export interface TailPage {
  events: FeedEvent[];
  /** The snapshot's xmin: every transaction below it has finished. */
  horizon: number;
  /** Committed rows exist past the cursor but behind the horizon (an older transaction is still open). */
  waiting: boolean;
  /** The highest cursor retention has dropped, from the same snapshot (see Tailer: a tailer behind it
   * may have missed rows, so its window must not claim to cover them). */
  trimMark: Cursor;
  /** The transactions whose rows the page left out (this process's own, see readTail). */
  skipped: string[];
  /** The statement's now() (epoch ms) on the primary; null when the read ran on a standby. */
  clockMs: number | null;
}

/**
 * A time below which the tailer has read every row: the tail read skips the partitions wholly
 * below it. Without one the read's cost grows with every partition RETENTION keeps (each has its
 * own index to probe, twice per read: PostgreSQL CPU per read 157–177 µs with 13 partitions, 333–343
 * with 35, against 93–97 with the floor; bench/experiments/tail-floor.ts), though only the newest
 * hold unread rows.
 *
 * Why a floor is safe (TailFloorTracker keeps it): commitfeed.floor_mark gives a time T and a
 * transaction id X such that every transaction that had an id before T has one below X. A row's
 * created_at is the clock when it was inserted, and its transaction has an id by then (the feed's txid
 * default is evaluated before its created_at default; append_plain takes the id before the time). So
 * once a tail read reaches a horizon past X and reads everything below it, every row with
 * created_at < T has been read. The floor is T − `marginMs`, for a clock that steps back: a step
 * smaller than the margin changes nothing; after a larger one the statement never uses a floor above
 * now() − margin, and the tracker forgets its floor when it sees the step.
 * Rows written with an explicit created_at in the past (not something commitfeed's functions do)
 * would be missed by the live tail if older than the floor.
 */
export interface TailFloor {
  /** Epoch ms; -Infinity: no floor (every partition is read). */
  atMs: number;
  marginMs: number;
}

/** The tail floor as SQL (see TailFloor), written into each scan of the feed rather than computed
 * once: PostgreSQL skips partitions only for an expression it can evaluate when the statement starts. */
const FLOOR = 'least($5::timestamptz, now() - $6::interval)';

export const TAIL_SQL = prepared(`
  with h as (
    select s.xmin, s.clock, (select m.txid from commitfeed.trim_mark m) as mark_txid,
           (select m.id from commitfeed.trim_mark m) as mark_id,
           -- Some row past the cursor and at or past the horizon exists exactly when the feed's
           -- last visible row is one: read that row by a backward index scan (one index leaf, the
           -- same plan at any size). Not an EXISTS over the range: with a row comparison btree
           -- started at the cursor and walked the backlog (60 ms per page 1.4M rows behind); keyed
           -- on the horizon, its generic plan, made while the day's partition was nearly empty and
           -- unanalysed, was a sequential scan of that partition, kept as it grew (measured: 6 ms
           -- per tail read after 70,000 events, most of PostgreSQL's CPU per publish).
           coalesce((select l.txid >= greatest(s.xmin, $1::xid8) and (l.txid, l.id) > ($1::xid8, $2::int8)
                     from (select w.txid, w.id from commitfeed.feed w
                           where w.created_at >= ${FLOOR}
                           order by w.txid desc, w.id desc limit 1) l), false) as waiting
    from (select pg_snapshot_xmin(pg_current_snapshot()) as xmin,
                 -- The primary's clock, which stamped the rows, for the tail floor to notice it
                 -- stepping back (see TailFloor); none from a standby.
                 case when pg_is_in_recovery() then null
                      else extract(epoch from now())::float8 * 1000 end as clock) s
  )
  -- The page's facts (horizon, waiting, trim mark, clock) ride on its first row only (n = 1, or the
  -- one row of an empty page), NULL on the others: every column of every row is a string
  -- node-postgres parses, and the tailer reads back every event written (measured: ~0.5 µs of the
  -- server's CPU per event of a batched publish for these four columns repeated on each row).
  -- row_number() follows the index order, so it costs no sort.
  select case when coalesce(p.n, 1) = 1 then h.xmin::text end as horizon,
         case when coalesce(p.n, 1) = 1 then h.clock end as clock,
         case when coalesce(p.n, 1) = 1 then h.waiting end as waiting,
         case when coalesce(p.n, 1) = 1 then h.mark_txid::text end as mark_txid,
         case when coalesce(p.n, 1) = 1 then h.mark_id::text end as mark_id,
         p.txid::text as txid, p.id::text as id,
         ${PAGE_COLUMNS}
  from h left join lateral (
    select ${EVENT_COLUMNS}, row_number() over (order by f.txid, f.id) as n
    from commitfeed.feed f
    where (f.txid, f.id) > ($1::xid8, $2::int8) and f.txid < h.xmin
      -- This process's own recent transactions: it holds their events (see own-writes.ts).
      and f.txid <> all($4::xid8[])
      -- Every row below the floor has been read (see TailFloor): written out here rather than taken
      -- from h, so that PostgreSQL skips the partitions wholly below it when the statement starts.
      and f.created_at >= ${FLOOR}
    order by f.txid, f.id
    limit $3
  ) p on true
  order by p.txid, p.id`);

/** The floor as the statement's parameters ($5, $6). */
export function floorParams(floor: TailFloor | undefined): [string, string] {
  const at =
    floor === undefined || floor.atMs === -Infinity ? '-infinity' : new Date(floor.atMs).toISOString();
  return [at, `${floor?.marginMs ?? 0} milliseconds`];
}

/**
 * The next page of the whole feed after `after`, from finished transactions only. The horizon comes
 * from the same statement (same snapshot) as the rows: reading it separately could skip rows that
 * commit in between.
 * `own`: this process's recent commits (see own-writes.ts). The page leaves their rows out; it
 * says which transactions it left out (`skipped`) so that the tailer puts in those events, and
 * only those, up to the tail the page establishes. `floor`: see TailFloor (none: every partition).
 * `suffix`: the feed's tag as the events' cursors end (history.ts).
 */
export async function readTail(
  db: Db,
  after: Cursor,
  limit: number,
  own?: OwnWrites,
  floor?: TailFloor,
  suffix = '',
): Promise<TailPage> {
  const skipped = own?.txids() ?? [];
  const { rows } = await db.executeQuery<
    Row & {
      horizon: string;
      clock: number | null;
      waiting: boolean;
      mark_txid: string;
      mark_id: string;
    }
  >(CompiledQuery.raw(TAIL_SQL, [String(after.txid), after.id, limit, skipped, ...floorParams(floor)]));
  const first = rows[0];
  return {
    horizon: Number(first.horizon),
    clockMs: first.clock,
    waiting: first.waiting,
    trimMark: trimMarkOf(first),
    events: first.txid === null ? [] : rows.map((r) => toEvent(r, suffix)),
    skipped,
  };
}
