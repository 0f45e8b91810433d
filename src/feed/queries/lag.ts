/**
 * How far behind the committed feed a position is: the rows past it and the age of the oldest of
 * them. Read by /metrics (commitfeed_feed_lag_seconds: the age alone) and by the live page's sampler
 * (the rows too, counted up to a cap). A position may be a horizon point (txid, 0) rather than a
 * row, so rows are counted, not ids subtracted.
 */
import { sql } from 'kysely';
import type { Db } from '../../db/database.ts';
import type { Cursor } from '../cursor.ts';

/**
 * Rows past `p`, counted up to `countUpTo` (0: not counted, no row is read for it), and the age in
 * seconds of the oldest of them (0 when there is none: caught up).
 */
export async function feedLag(db: Db, p: Cursor, countUpTo = 0): Promise<{ rows: number; ageS: number }> {
  const { rows } = await sql<{ n: number; age: number | null }>`
    select (select count(*)::int4 from (
              select 1 from commitfeed.feed
              where (txid, id) > (${String(p.txid)}::xid8, ${String(p.id)}::int8)
              limit ${countUpTo}) x) as n,
           (select extract(epoch from clock_timestamp() - created_at)::float8
            from commitfeed.feed
            where (txid, id) > (${String(p.txid)}::xid8, ${String(p.id)}::int8)
            order by txid, id limit 1) as age`.execute(db);
  return { rows: rows[0]?.n ?? 0, ageS: Math.max(0, rows[0]?.age ?? 0) };
}
