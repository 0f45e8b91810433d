/** The horizon now: where the tailer starts (history is served by catch-up reads, not replayed). */
import { sql } from 'kysely';
import type { Db } from '../../db/database.ts';
import { type Cursor, horizonCursor } from '../cursor.ts';

/** The current horizon as a cursor: every event of a finished transaction is at or before it. */
export async function currentHorizon(db: Db): Promise<Cursor> {
  const { rows } = await sql<{
    xmin: string;
  }>`select pg_snapshot_xmin(pg_current_snapshot())::text as xmin`.execute(db);
  return horizonCursor(Number(rows[0].xmin));
}
