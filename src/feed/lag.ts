/** How far behind the committed feed a position is, in seconds of the oldest row past it. */
import { sql } from 'kysely';
import type { Db } from '../db/database.ts';
import type { Cursor } from './cursor.ts';

/** Age of the oldest feed row past `p` (0 when there is none: caught up). */
export async function feedLagSeconds(db: Db, p: Cursor): Promise<number> {
  const { rows } = await sql<{ age: number }>`
    select extract(epoch from clock_timestamp() - created_at)::float8 as age
    from commitfeed.feed
    where (txid, id) > (${String(p.txid)}::xid8, ${p.id}::int8)
    order by txid, id limit 1`.execute(db);
  return rows.length === 0 ? 0 : Math.max(0, rows[0].age);
}
