/** How far the tailer is behind the committed feed, as the live page shows it (one statement a tick). */
import { type Kysely, sql } from 'kysely';
import type { Database } from '../db/database.ts';
import type { Cursor } from '../feed/cursor.ts';

/** Rows past the tailer counted per tick at most: a bounded index walk, not a count of the feed. */
export const BEHIND_CAP = 10_000;

/**
 * Rows past `position` (up to BEHIND_CAP + 1) and the age of the oldest of them. The tailer's position
 * may be a horizon point (txid, 0) rather than a row, so rows are counted, not ids subtracted.
 */
export async function behind(
  db: Kysely<Database>,
  position: Cursor,
): Promise<{ rows: number; ageS: number }> {
  const { rows } = await sql<{ n: number; age: number | null }>`
    select (select count(*)::int4 from (
              select 1 from commitfeed.feed
              where (txid, id) > (${String(position.txid)}::xid8, ${String(position.id)}::int8)
              limit ${BEHIND_CAP + 1}) x) as n,
           (select extract(epoch from clock_timestamp() - created_at)::float8
            from commitfeed.feed
            where (txid, id) > (${String(position.txid)}::xid8, ${String(position.id)}::int8)
            order by txid, id limit 1) as age`.execute(db);
  return { rows: rows[0]?.n ?? 0, ageS: Math.max(0, rows[0]?.age ?? 0) };
}
