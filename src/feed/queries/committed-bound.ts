/**
 * How far this feed's history reaches now, for telling a cursor this feed could have minted from one
 * it never reached (history.ts). `xmax`: the first transaction id not yet assigned, so every event's
 * txid is below it (and a horizon cursor, `(xmin, 0)`, at most at it). `lastId`: the highest id the
 * feed's sequence has handed out (0: none), so every event's id is at most it. Both only grow within
 * one history; they are read on the primary (a standby's snapshot and sequence lag behind).
 */
import { sql } from 'kysely';
import type { Db } from '../../db/database.ts';

export interface CommittedBound {
  xmax: number;
  lastId: number;
}

export async function readCommittedBound(db: Db): Promise<CommittedBound> {
  const { rows } = await sql<{ xmax: string; last_id: string }>`
    select pg_snapshot_xmax(pg_current_snapshot())::text as xmax,
           coalesce(pg_sequence_last_value('commitfeed.feed_id_seq'), 0)::text as last_id`.execute(db);
  return { xmax: Number(rows[0].xmax), lastId: Number(rows[0].last_id) };
}
