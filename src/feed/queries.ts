/**
 * The feed's hot SQL, in one place. Every function takes `(db | trx, ...)` so the same code serves
 * the batcher (one autocommit statement), the HTTP transaction endpoint and the library API (the
 * caller's transaction).
 */
import { CompiledQuery, sql } from 'kysely';
import { columns } from '../db/columns.ts';
import type { Db } from '../db/database.ts';
import { prepared } from '../db/prepared.ts';
import { type Cursor, START, compareCursors, horizonCursor } from './cursor.ts';
import { type FeedEvent, feedEvent } from './event.ts';
import { NAMED_SSE_FRAME_SQL, SSE_FRAME_SQL, lastFrameCursor } from './frames.ts';
import type { CheckedEventInput, EventInput } from './event.ts';
import type { OwnWrites } from './own-writes.ts';

export type { FeedEvent } from './event.ts';

/** The one channel every feed write notifies (payload empty: the feed, not the notify, is the truth). */
export const FEED_CHANNEL = 'commitfeed_feed';

export type { EventInput } from './event.ts';

export interface AppendResult {
  /** The event's cursor. */
  id: string;
  stream: string;
  /** True when `key` matched an event already in the stream: nothing was appended. */
  duplicate: boolean;
}

export interface Row {
  txid: string;
  id: string;
  stream: string;
  type: string | null;
  key: string | null;
  data: string;
  ms: number;
}

export function toEvent(r: Row): FeedEvent {
  return feedEvent(r.txid, r.id, r, r.ms);
}

/**
 * The one write implementation is the SQL function `commitfeed.append` (src/sql/append.sql): it
 * validates, drops keys already taken in the stream, inserts, and notifies once. The batcher, the
 * HTTP transaction endpoint, the library API (src/index.ts), `commitfeed.publish` and enqueue's
 * wake-up rows all go through it.
 */
export const APPEND_SQL = prepared(
  'select cursor, duplicate from commitfeed.append($1::text[], $2::text[], $3::text[], $4::json[])',
);

/** APPEND_SQL without the input checks, for events toEventInput() accepted (see append-unchecked.sql). */
export const APPEND_UNCHECKED_SQL = prepared(
  'select cursor, duplicate from commitfeed.append_unchecked($1::text[], $2::text[], $3::text[], $4::json[])',
);

/** APPEND_SQL's parameters: one array per column. */
export function appendParams(events: readonly EventInput[]): unknown[] {
  return columns(events, ['stream', 'type', 'key', 'data']);
}

/** An append's answer carries one result per event: anything else is a bug, never bad input. */
function expectOnePerEvent(fn: string, results: number, events: readonly unknown[]): void {
  if (results !== events.length)
    throw new Error(`${fn} returned ${results} results for ${events.length} events`);
}

/** APPEND_SQL's rows (one per event, in order) as results. */
export function appendResults(
  events: readonly EventInput[],
  rows: readonly { cursor: string; duplicate: boolean }[],
): AppendResult[] {
  expectOnePerEvent('commitfeed.append', rows.length, events);
  return rows.map((r, i) => ({ id: r.cursor, stream: events[i].stream, duplicate: r.duplicate }));
}

/**
 * Appends events in one statement and notifies the feed channel once; the notification is delivered
 * at the commit of `db`'s transaction (or of the statement itself when `db` is not a transaction).
 * Events with a `key` already present in their stream are not appended: their result carries the
 * original event's id and `duplicate: true` (commitfeed.feed_keys' primary key makes this hold
 * under concurrent retries, for DEDUP_WINDOW); a key repeated within the call is appended once, later copies report the first.
 *
 * @example
 *   await db.transaction().execute(async (trx) => {
 *     await trx.insertInto('orders').values(order).execute();
 *     await appendEvents(trx, [{ stream: 'orders', type: 'created', key: null, data: JSON.stringify(order) }]);
 *   });
 */
export async function appendEvents(db: Db, events: readonly EventInput[]): Promise<AppendResult[]> {
  if (events.length === 0) return [];
  const { rows } = await db.executeQuery<{ cursor: string; duplicate: boolean }>(
    CompiledQuery.raw(APPEND_SQL, appendParams(events)),
  );
  return appendResults(events, rows);
}

/**
 * appendEvents() for events already checked in TypeScript (the type says toEventInput() made them):
 * the same statement without the SQL function's restatement of those checks, which were a quarter
 * to a third of its work. The group-commit batcher's write.
 */
export async function appendCheckedEvents(
  db: Db,
  events: readonly CheckedEventInput[],
  own?: OwnWrites,
): Promise<AppendResult[]> {
  if (events.length === 0) return [];
  if (events.every((e) => e.key === null)) return appendPlain(db, events, own);
  const { rows } = await db.executeQuery<{ cursor: string; duplicate: boolean }>(
    CompiledQuery.raw(APPEND_UNCHECKED_SQL, appendParams(events)),
  );
  return appendResults(events, rows);
}

/** commitfeed.append_plain (no keys): one row, the transaction id, the ids in input order, the time. */
export const APPEND_PLAIN_SQL = prepared(
  'select tx, ids, ms from commitfeed.append_plain($1::text[], $2::text[], $3::json[])',
);

/**
 * `own`: only for a statement that commits by itself (the group commit's, not a caller's
 * transaction): its events are recorded for the tailer once it has committed (see own-writes.ts).
 */
async function appendPlain(
  db: Db,
  events: readonly CheckedEventInput[],
  own: OwnWrites | undefined,
): Promise<AppendResult[]> {
  const { rows } = await db.executeQuery<{ tx: string; ids: string; ms: number }>(
    CompiledQuery.raw(APPEND_PLAIN_SQL, columns(events, ['stream', 'type', 'data'])),
  );
  const texts = rows[0]?.ids.split(',') ?? [];
  expectOnePerEvent('commitfeed.append_plain', texts.length, events);
  const { tx, ms } = rows[0];
  own?.record(tx, texts.map(Number), events, ms);
  const prefix = `${tx}-`;
  return texts.map((id, i) => ({ id: prefix + id, stream: events[i].stream, duplicate: false }));
}

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

/** The trim mark a range statement returns on its first row (`mark_txid`, `mark_id`; START when none). */
export function trimMarkOf(row: { mark_txid?: string | null; mark_id?: string | null } | undefined): Cursor {
  return { txid: Number(row?.mark_txid ?? 0), id: Number(row?.mark_id ?? 0) };
}

/** A feed row `f` as the tail and catch-up reads return it (see Row). */
export const EVENT_COLUMNS =
  'f.txid, f.id, f.stream, f.type, f.key, f.data, extract(epoch from f.created_at)::float8 * 1000 as ms';

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
         p.stream, p.type, p.key, p.data::text as data, p.ms
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

/**
 * A time below which the tailer has read every row: the tail read skips the partitions wholly
 * below it. Without one the read's cost grows with every partition RETENTION keeps (each has its
 * own index to probe, twice per read: PostgreSQL CPU per read 157–177 µs with 13 partitions, 333–343
 * with 35, against 93–97 with the floor; bench/tail-floor.ts), though only the newest hold unread rows.
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

/** A time and a transaction id for the tail floor (see commitfeed.floor_mark); on the primary. */
export async function floorMark(db: Db): Promise<{ atMs: number; xid: number }> {
  const { rows } = await db.executeQuery<{ xid: string; at: number }>(
    CompiledQuery.raw('select xid, at from commitfeed.floor_mark()', []),
  );
  return { atMs: rows[0].at, xid: Number(rows[0].xid) };
}

/** The floor as the statement's parameters ($5, $6). */
function floorParams(floor: TailFloor | undefined): [string, string] {
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
 */
export async function readTail(
  db: Db,
  after: Cursor,
  limit: number,
  own?: OwnWrites,
  floor?: TailFloor,
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
    events: first.txid === null ? [] : rows.map(toEvent),
    skipped,
  };
}

/**
 * The page both catch-up reads (rows and frames) take: events of the streams in $1 after ($2, $3) up
 * to ($4, $5), in feed order, at most $6. One stream uses `=` so the (stream, txid, id) index returns
 * rows already in order. The arguments are rangeArgs().
 */
function rangePage(columns: string, streams: 'one' | 'any'): string {
  return `select ${columns}
    from commitfeed.feed f
    where ${streams === 'one' ? 'f.stream = $1' : 'f.stream = any($1::text[])'}
      and (f.txid, f.id) > ($2::xid8, $3::int8)
      and (f.txid, f.id) <= ($4::xid8, $5::int8)
    order by f.txid, f.id
    limit $6`;
}

function rangeArgs(streams: readonly string[], after: Cursor, upTo: Cursor, limit: number): unknown[] {
  return [
    streams.length === 1 ? streams[0] : streams,
    String(after.txid),
    after.id,
    String(upTo.txid),
    upTo.id,
    limit,
  ];
}

/** The statement's own horizon. Catch-up reads return it so that a read on a standby can tell
 * whether its snapshot holds every event up to the page's bound (see reads.ts: horizonCovers). */
const SNAPSHOT_XMIN = 'pg_snapshot_xmin(pg_current_snapshot())';

function rangeSql(streams: 'one' | 'any'): string {
  return prepared(`
  select m.txid::text as mark_txid, m.id::text as mark_id, m.xmin::text as xmin,
         p.txid::text as txid, p.id::text as id, p.stream, p.type, p.key, p.data::text as data, p.ms
  from (select t.txid, t.id, ${SNAPSHOT_XMIN} as xmin from commitfeed.trim_mark t) m
  left join lateral (${rangePage(EVENT_COLUMNS, streams)}) p on true
  order by p.txid, p.id`);
}
export const RANGE_ONE_SQL = rangeSql('one');
const RANGE_ANY_SQL = rangeSql('any');

/**
 * Events of `streams` in (after, upTo], in feed order: the catch-up read. `upTo` must be a position
 * the tailer has reached, so every row up to it is from a finished transaction. `trimMark` (the
 * highest cursor retention has dropped) comes from the same statement, so from the same snapshot as
 * the rows: a reader that finds `after` below it may have missed events (see Tailer.read).
 */
export async function readRange(
  db: Db,
  streams: readonly string[],
  after: Cursor,
  upTo: Cursor,
  limit: number,
): Promise<{ events: FeedEvent[]; trimMark: Cursor; horizon: number }> {
  if (compareCursors(after, upTo) >= 0) return { events: [], trimMark: START, horizon: Infinity };
  const text = streams.length === 1 ? RANGE_ONE_SQL : RANGE_ANY_SQL;
  const { rows } = await db.executeQuery<Row & { mark_txid: string; mark_id: string; xmin: string }>(
    CompiledQuery.raw(text, rangeArgs(streams, after, upTo, limit)),
  );
  const first = rows[0];
  if (first === undefined) return { events: [], trimMark: START, horizon: 0 };
  const trimMark = { txid: Number(first.mark_txid), id: Number(first.mark_id) };
  return { events: first.txid === null ? [] : rows.map(toEvent), trimMark, horizon: Number(first.xmin) };
}

function rangeFramesSql(streams: 'one' | 'any'): string {
  // The aggregate reads the ordered subquery in order (no join in between), so string_agg keeps
  // feed order without an ORDER BY of its own, which would sort the page again.
  return prepared(`
  select (select m.txid::text from commitfeed.trim_mark m) as mark_txid, ${SNAPSHOT_XMIN}::text as xmin,
         (select m.id::text from commitfeed.trim_mark m) as mark_id,
         count(*)::int as fetched,
         count(*) filter (where octet_length(q.frame) > $7)::int as big,
         coalesce(string_agg(q.frame, '') filter (where octet_length(q.frame) <= $7), '') as frames
  from (${rangePage(`${streams === 'one' ? SSE_FRAME_SQL : NAMED_SSE_FRAME_SQL} as frame`, streams)}) q`);
}
const RANGE_FRAMES_ONE_SQL = rangeFramesSql('one');
const RANGE_FRAMES_ANY_SQL = rangeFramesSql('any');

export interface FramesPage {
  /** The events' SSE frames, concatenated in feed order; null when one frame was larger than
   * `maxFrameBytes` (the caller reads the page as rows instead: see Tailer.readFrames). */
  frames: string | null;
  count: number;
  /** The last event's cursor (null: none). */
  last: Cursor | null;
  /** The page stopped at `limit`: more events may follow `last` before `upTo`. */
  more: boolean;
  trimMark: Cursor;
  /** The statement's snapshot xmin. */
  horizon: number;
}

/**
 * readRange() for SSE: the same rows as one string of SSE frames built by PostgreSQL (see
 * frames.ts), so this process passes the bytes through. A page holds at most `limit` frames of at
 * most `maxFrameBytes` each, so the string stays bounded however large events are.
 */
export async function readRangeFrames(
  db: Db,
  streams: readonly string[],
  after: Cursor,
  upTo: Cursor,
  limit: number,
  maxFrameBytes: number,
): Promise<FramesPage> {
  const text = streams.length === 1 ? RANGE_FRAMES_ONE_SQL : RANGE_FRAMES_ANY_SQL;
  const { rows } = await db.executeQuery<{
    mark_txid: string | null;
    mark_id: string | null;
    fetched: number;
    big: number;
    frames: string;
    xmin: string;
  }>(CompiledQuery.raw(text, [...rangeArgs(streams, after, upTo, limit), maxFrameBytes]));
  const r = rows[0];
  const trimMark = trimMarkOf(r);
  const more = r.fetched === limit;
  const horizon = Number(r.xmin);
  if (r.big > 0) return { frames: null, count: r.fetched, last: null, more, trimMark, horizon };
  return { frames: r.frames, count: r.fetched, last: lastFrameCursor(r.frames), more, trimMark, horizon };
}

/** The current horizon as a cursor: every event of a finished transaction is at or before it. */
export async function currentHorizon(db: Db): Promise<Cursor> {
  const { rows } = await sql<{
    xmin: string;
  }>`select pg_snapshot_xmin(pg_current_snapshot())::text as xmin`.execute(db);
  return horizonCursor(Number(rows[0].xmin));
}
