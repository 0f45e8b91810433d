/**
 * The trim mark (commitfeed.trim_mark): the highest cursor retention has dropped, recorded by the
 * janitor in the transaction that drops the rows (src/retention/partitions.ts). A reader whose cursor
 * is below it may have missed events and is told so.
 */
import { sql } from 'kysely';
import type { Db } from '../../db/database.ts';
import { type Cursor, START } from '../cursor.ts';

/** The highest cursor ever dropped (START when nothing was). */
export async function readTrimMark(db: Db): Promise<{ mark: Cursor; trimmedAt: Date | null }> {
  const { rows } = await sql<{ txid: string; id: string; trimmed_at: Date | null }>`
    select txid::text as txid, id::text as id, trimmed_at from commitfeed.trim_mark`.execute(db);
  const r = rows[0];
  return r
    ? { mark: { txid: Number(r.txid), id: Number(r.id) }, trimmedAt: r.trimmed_at }
    : { mark: START, trimmedAt: null };
}
