/**
 * The hub's reads: exact-topic catch-up through the topic indexes (the feed's `topic` column and
 * commitfeed.mercure_topics; a page in the feed's shape, src/feed/queries/marked-page.ts, read
 * through FeedReads like every catch-up page), and the id lookups of reconnection (on the primary).
 * They stay here, not in src/feed/queries/, because they read what only the Mercure hub writes (its
 * topic indexes, the `mid` column, the `mercure/updates` stream). Every function takes `(db | trx, ...)`.
 */
import { CompiledQuery } from 'kysely';
import type { Db } from '../db/database.ts';
import { prepared } from '../db/prepared.ts';
import type { Cursor } from '../feed/cursor.ts';
import { EVENT_COLUMNS } from '../feed/queries/event-columns.ts';
import { type MarkedPage, markedPageSql, readMarkedPage } from '../feed/queries/marked-page.ts';
import { MercureIds } from './ids.ts';

/**
 * Updates with any of the topics in $1 in (($2,$3), ($4,$5)], in feed order, at most $6, with the trim
 * mark and the horizon from the same statement. Each topic reads its own index ranges in order and
 * contributes at most $6 rows from each, so a page costs O(topics × page) whatever the history: the
 * feed's topic index (an update's canonical topic, the feed row itself) and commitfeed.mercure_topics
 * (its other topics, and every topic of updates written before the feed had the column); the feed row
 * of a mercure_topics entry is found by its (txid, id) and created_at (one partition).
 */
export const TOPIC_RANGE_SQL = markedPageSql(`
    select ${EVENT_COLUMNS}
    from (select distinct x.txid, x.id, x.created_at
          from unnest($1::text[]) q(topic), lateral (
            (select c.txid, c.id, c.created_at from commitfeed.feed c
             where c.topic = q.topic
               and (c.txid, c.id) > ($2::xid8, $3::int8) and (c.txid, c.id) <= ($4::xid8, $5::int8)
             order by c.txid, c.id
             limit $6)
            union all
            (select t.txid, t.id, t.created_at from commitfeed.mercure_topics t
             where t.topic = q.topic
               and (t.txid, t.id) > ($2::xid8, $3::int8) and (t.txid, t.id) <= ($4::xid8, $5::int8)
             order by t.txid, t.id
             limit $6)) x
          order by x.txid, x.id
          limit $6) k
    join commitfeed.feed f
      on f.txid = k.txid and f.id = k.id and f.created_at = k.created_at and f.stream = 'mercure/updates'
    order by f.txid, f.id`);

/** Updates of `topics` after `after` up to `upTo` (a position the tailer has reached), at most `limit`. */
export async function readTopicRange(
  db: Db,
  topics: readonly string[],
  after: Cursor,
  upTo: Cursor,
  limit: number,
): Promise<MarkedPage> {
  return readMarkedPage(db, TOPIC_RANGE_SQL, [
    topics,
    String(after.txid),
    after.id,
    String(upTo.txid),
    upTo.id,
    limit,
  ]);
}

// The earliest of: the updates stored with `mid` (its index), and the update whose generated id it is
// (ids.ts: the position it decrypts to, where an update stored without an id; $2/$3 NULL when `mid`
// is not a UUIDv4).
const ID_LOOKUP_SQL = prepared(`
  select x.txid::text as txid, x.id::text as id from (
    (select f.txid, f.id from commitfeed.feed f
     where f.mid = $1 and f.stream = 'mercure/updates'
     order by f.txid, f.id
     limit 1)
    union all
    (select f.txid, f.id from commitfeed.feed f
     where f.txid = $2::xid8 and f.id = $3::int8 and f.mid is null and f.stream = 'mercure/updates')) x
  order by x.txid, x.id
  limit 1`);

/** The position of the earliest update bearing `mid` (draft: a reused id means its first use). */
export async function findUpdateId(db: Db, mid: string, ids: MercureIds): Promise<Cursor | undefined> {
  const at = ids.positionOf(mid);
  const { rows } = await db.executeQuery<{ txid: string; id: string }>(
    CompiledQuery.raw(ID_LOOKUP_SQL, [mid, at?.txid ?? null, at?.id ?? null]),
  );
  return rows[0] === undefined ? undefined : { txid: Number(rows[0].txid), id: Number(rows[0].id) };
}

const LAST_ID_SQL = prepared(`
  select f.mid, f.txid::text as txid, f.id::text as id from commitfeed.feed f
  where f.stream = 'mercure/updates' and (f.txid, f.id) <= ($1::xid8, $2::int8)
  order by f.txid desc, f.id desc
  limit 1`);

/** The id of the last update at or before `at` (undefined: none is held). */
export async function lastUpdateId(db: Db, at: Cursor, ids: MercureIds): Promise<string | undefined> {
  const { rows } = await db.executeQuery<{ mid: string | null; txid: string; id: string }>(
    CompiledQuery.raw(LAST_ID_SQL, [String(at.txid), at.id]),
  );
  const r = rows[0];
  if (r === undefined) return undefined;
  return r.mid ?? ids.idOf(r.txid, r.id);
}

/**
 * The database's generated ids: its key (commitfeed.mercure_id_key, migrations/0010_mercure_id_key.ts),
 * read once.
 */
export async function loadMercureIds(db: Db): Promise<MercureIds> {
  const { rows } = await db.executeQuery<{ key: Buffer }>(
    CompiledQuery.raw('select key from commitfeed.mercure_id_key'),
  );
  if (rows[0] === undefined)
    throw new Error('commitfeed.mercure_id_key is empty (migrations/0010_mercure_id_key.ts)');
  return new MercureIds(rows[0].key);
}
