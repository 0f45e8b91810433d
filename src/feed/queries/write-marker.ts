/**
 * The self-check's marker write (see marker.ts): one autocommit statement on the pool that inserts
 * the marker row and notifies with its own payload. Not the group commit, not `commitfeed.append`
 * (which refuses the name) and not recorded in own-writes.ts: the tail read must really read the row,
 * so the marker proves the path every other process's writes take to this one's subscribers.
 * Measured: see docs/operations.md#self-check.
 */
import { sql } from 'kysely';
import type { Db } from '../../db/database.ts';
import type { Cursor } from '../cursor.ts';
import { FEED_CHANNEL } from '../listener.ts';
import { MARKER_STREAM } from '../marker.ts';

/**
 * Writes a marker with `data` (JSON text) and `payload` as its NOTIFY; resolves with its position
 * once committed. The column defaults take the transaction id before the time, as the tail floor
 * needs (TailFloor in queries/read-tail.ts).
 */
export async function writeMarker(db: Db, data: string, payload: string): Promise<Cursor> {
  const { rows } = await sql<{ tx: string; id_text: string }>`
    with ins as (
      insert into commitfeed.feed (stream, type, data) values (${MARKER_STREAM}, 'marker', ${data}::json)
      returning txid, id
    )
    select ins.txid::text as tx, ins.id::text as id_text, pg_notify(${FEED_CHANNEL}, ${payload}) from ins`.execute(
    db,
  );
  return { txid: Number(rows[0].tx), id: Number(rows[0].id_text) };
}
