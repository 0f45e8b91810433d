/** commitfeed.floor_mark (src/sql/floor-mark.sql): the tail floor's mark (see TailFloor in read-tail.ts). */
import { CompiledQuery } from 'kysely';
import type { Db } from '../../db/database.ts';

/** A time and a transaction id for the tail floor (see commitfeed.floor_mark); on the primary. */
export async function floorMark(db: Db): Promise<{ atMs: number; xid: number }> {
  const { rows } = await db.executeQuery<{ xid: string; at: number }>(
    CompiledQuery.raw('select xid, at from commitfeed.floor_mark()', []),
  );
  return { atMs: rows[0].at, xid: Number(rows[0].xid) };
}
