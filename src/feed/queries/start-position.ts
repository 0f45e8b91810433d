/**
 * Where a reader may start without waiting for the tailer: the horizon, when every committed row is
 * below it. Both come from one statement (one snapshot): every write acknowledged before the
 * statement began is visible to it, so when no visible row is at or past the horizon, the horizon is
 * after every acknowledged write and no transaction still running can commit a row below it.
 * `waiting`: some committed row is past the horizon (an older transaction is still open); no position
 * is both after that row and safe from the open transaction, so the caller must wait.
 */
import { CompiledQuery } from 'kysely';
import type { Db } from '../../db/database.ts';
import { type Cursor, horizonCursor } from '../cursor.ts';

export const START_POSITION_SQL = `
  select s.xmin::text as xmin,
         exists (select 1 from commitfeed.feed w where w.txid >= s.xmin) as waiting
  from (select pg_snapshot_xmin(pg_current_snapshot()) as xmin) s`;

export async function readStartPosition(db: Db): Promise<{ horizon: Cursor; waiting: boolean }> {
  const { rows } = await db.executeQuery<{ xmin: string; waiting: boolean }>(
    CompiledQuery.raw(START_POSITION_SQL, []),
  );
  return { horizon: horizonCursor(Number(rows[0].xmin)), waiting: rows[0].waiting };
}
