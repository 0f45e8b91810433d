/**
 * The feed's hot SQL, in one place. Every function takes `(db | trx, ...)` so the same code serves
 * the batcher (one autocommit statement), the HTTP transaction endpoint and the library API (the
 * caller's transaction).
 */
import { sql } from 'kysely';
import type { Db } from '../db/database.ts';
import { type Cursor, compareCursors, horizonCursor } from './cursor.ts';

/** The one channel every feed write notifies (payload empty: the feed, not the notify, is the truth). */
export const FEED_CHANNEL = 'commitfeed_feed';

/** One event to append. `data` is JSON text (one line), stored and served back byte for byte. */
export interface EventInput {
  stream: string;
  type: string | null;
  key: string | null;
  data: string;
}

export interface AppendResult {
  /** The event's cursor. */
  id: string;
  stream: string;
  /** True when `key` matched an event already in the stream: nothing was appended. */
  duplicate: boolean;
}

/** An event read from the feed. `frame` caches its SSE frame, built once for every subscriber. */
export interface FeedEvent extends Cursor {
  cursor: string;
  stream: string;
  type: string | null;
  key: string | null;
  data: string;
  /** created_at, epoch milliseconds */
  ms: number;
  frame?: string;
}

interface Row {
  txid: string;
  id: string;
  stream: string;
  type: string | null;
  key: string | null;
  data: string;
  ms: number;
}

function toEvent(r: Row): FeedEvent {
  const txid = Number(r.txid);
  const id = Number(r.id);
  return {
    txid,
    id,
    cursor: `${r.txid}-${r.id}`,
    stream: r.stream,
    type: r.type,
    key: r.key,
    data: r.data,
    ms: r.ms,
  };
}

const keyOf = (stream: string, key: string) => `${stream}\u0000${key}`;

/**
 * Appends events in one statement and notifies the feed channel once; the notification is delivered
 * at the commit of `db`'s transaction (or of the statement itself when `db` is not a transaction).
 * Events with a `key` already present in their stream are not appended: their result carries the
 * original event's id and `duplicate: true` (the unique index makes this hold under concurrent retries).
 *
 * @example
 *   await db.transaction().execute(async (trx) => {
 *     await trx.insertInto('orders').values(order).execute();
 *     await appendEvents(trx, [{ stream: 'orders', type: 'created', key: null, data: JSON.stringify(order) }]);
 *   });
 */
export async function appendEvents(db: Db, events: readonly EventInput[]): Promise<AppendResult[]> {
  // A key repeated within the call is appended once; later copies report the first.
  const firstOfKey = new Map<string, number>();
  const unique: EventInput[] = [];
  const slot: number[] = []; // events[i] -> index in unique
  for (const e of events) {
    if (e.key !== null) {
      const k = keyOf(e.stream, e.key);
      const seen = firstOfKey.get(k);
      if (seen !== undefined) {
        slot.push(seen);
        continue;
      }
      firstOfKey.set(k, unique.length);
    }
    slot.push(unique.length);
    unique.push(e);
  }

  const { rows } = await sql<{ txid: string; id: string; key: string | null; stream: string }>`
    with ins as (
      insert into commitfeed.feed (stream, type, key, data)
      select * from unnest(${unique.map((e) => e.stream)}::text[], ${unique.map((e) => e.type)}::text[],
                           ${unique.map((e) => e.key)}::text[], ${unique.map((e) => e.data)}::json[])
      on conflict (stream, key) where key is not null do nothing
      returning txid, id, stream, key
    )
    select txid::text as txid, id::text as id, stream, key,
           (select pg_notify(${FEED_CHANNEL}, '')) as notified
    from ins`.execute(db);

  // RETURNING yields rows in insertion order; rows skipped by ON CONFLICT are absent, so keyed rows
  // are matched by (stream, key) and unkeyed ones by position among the unkeyed.
  const results: (AppendResult | undefined)[] = new Array(unique.length);
  const byKey = new Map<string, AppendResult>();
  let r = 0;
  for (const row of rows) {
    const res: AppendResult = { id: `${row.txid}-${row.id}`, stream: row.stream, duplicate: false };
    if (row.key !== null) byKey.set(keyOf(row.stream, row.key), res);
    else {
      while (unique[r].key !== null) r++;
      results[r++] = res;
    }
  }
  const missing: EventInput[] = [];
  unique.forEach((e, i) => {
    if (e.key === null) return;
    const found = byKey.get(keyOf(e.stream, e.key));
    if (found) results[i] = found;
    else missing.push(e);
  });
  if (missing.length > 0) {
    const existing = await findByKeys(db, missing);
    unique.forEach((e, i) => {
      if (results[i] || e.key === null) return;
      const id = existing.get(keyOf(e.stream, e.key));
      if (!id)
        throw new Error(
          `event with key ${JSON.stringify(e.key)} in ${e.stream} conflicted but was not found`,
        );
      results[i] = { id, stream: e.stream, duplicate: true };
    });
  }
  const seenSlot = new Set<number>();
  return slot.map((s) => {
    const res = results[s]!;
    if (seenSlot.has(s)) return { ...res, duplicate: true };
    seenSlot.add(s);
    return res;
  });
}

async function findByKeys(db: Db, events: EventInput[]): Promise<Map<string, string>> {
  const { rows } = await sql<{ stream: string; key: string; txid: string; id: string }>`
    select f.stream, f.key, f.txid::text as txid, f.id::text as id
    from commitfeed.feed f
    join unnest(${events.map((e) => e.stream)}::text[], ${events.map((e) => e.key)}::text[]) as k(stream, key)
      on f.stream = k.stream and f.key = k.key`.execute(db);
  return new Map(rows.map((r) => [keyOf(r.stream, r.key), `${r.txid}-${r.id}`]));
}

export interface TailPage {
  events: FeedEvent[];
  /** The snapshot's xmin: every transaction below it has finished. */
  horizon: number;
  /** Committed rows exist past the cursor but behind the horizon (an older transaction is still open). */
  waiting: boolean;
}

/**
 * The next page of the whole feed after `after`, from finished transactions only. The horizon comes
 * from the same statement (same snapshot) as the rows: reading it separately could skip rows that
 * commit in between.
 */
export async function readTail(db: Db, after: Cursor, limit: number): Promise<TailPage> {
  const { rows } = await sql<Row & { horizon: string; waiting: boolean }>`
    with h as (
      select s.xmin,
             exists (select 1 from commitfeed.feed w
                     where w.txid >= s.xmin and (w.txid, w.id) > (${String(after.txid)}::xid8, ${after.id}::int8)) as waiting
      from (select pg_snapshot_xmin(pg_current_snapshot()) as xmin) s
    )
    select h.xmin::text as horizon, h.waiting, p.txid::text as txid, p.id::text as id,
           p.stream, p.type, p.key, p.data::text as data, p.ms
    from h left join lateral (
      select f.txid, f.id, f.stream, f.type, f.key, f.data,
             extract(epoch from f.created_at)::float8 * 1000 as ms
      from commitfeed.feed f
      where (f.txid, f.id) > (${String(after.txid)}::xid8, ${after.id}::int8) and f.txid < h.xmin
      order by f.txid, f.id
      limit ${limit}
    ) p on true
    order by p.txid, p.id`.execute(db);
  const first = rows[0];
  return {
    horizon: Number(first.horizon),
    waiting: first.waiting,
    events: first.txid === null ? [] : rows.map(toEvent),
  };
}

/**
 * Events of `streams` in (after, upTo], in feed order: the catch-up read. `upTo` must be a position
 * the tailer has reached, so every row up to it is from a finished transaction.
 */
export async function readRange(
  db: Db,
  streams: readonly string[],
  after: Cursor,
  upTo: Cursor,
  limit: number,
): Promise<FeedEvent[]> {
  if (compareCursors(after, upTo) >= 0) return [];
  // A single stream uses `=` so the (stream, txid, id) index returns rows already in order.
  const streamFilter =
    streams.length === 1
      ? sql`f.stream = ${streams[0]}`
      : sql`f.stream = any(${streams as string[]}::text[])`;
  const { rows } = await sql<Row>`
    select f.txid::text as txid, f.id::text as id, f.stream, f.type, f.key, f.data::text as data,
           extract(epoch from f.created_at)::float8 * 1000 as ms
    from commitfeed.feed f
    where ${streamFilter}
      and (f.txid, f.id) > (${String(after.txid)}::xid8, ${after.id}::int8)
      and (f.txid, f.id) <= (${String(upTo.txid)}::xid8, ${upTo.id}::int8)
    order by f.txid, f.id
    limit ${limit}`.execute(db);
  return rows.map(toEvent);
}

/** The current horizon as a cursor: every event of a finished transaction is at or before it. */
export async function currentHorizon(db: Db): Promise<Cursor> {
  const { rows } = await sql<{
    xmin: string;
  }>`select pg_snapshot_xmin(pg_current_snapshot())::text as xmin`.execute(db);
  return horizonCursor(Number(rows[0].xmin));
}
