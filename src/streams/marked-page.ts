/**
 * Catch-up reads that take the trim mark from the statement that reads the rows (so from the same
 * snapshot: a reader whose cursor is below the mark may have missed events). Shared by the Mercure
 * hub's topic reads (src/mercure/queries.ts) and the glob reads of /v1/events (glob.ts); the feed's
 * own stream reads (src/feed/queries.ts readRange) also return the statement's horizon.
 */
import { CompiledQuery } from 'kysely';
import type { Db } from '../db/database.ts';
import { prepared } from '../db/prepared.ts';
import type { Cursor } from '../feed/cursor.ts';
import type { FeedEvent } from '../feed/event.ts';
import { type Row, toEvent, trimMarkOf } from '../feed/queries.ts';

/**
 * A prepared statement: the trim mark joined to `page`, a select of EVENT_COLUMNS (src/feed/queries.ts)
 * in feed order. It returns one row per event, each carrying the mark, or one row with null event
 * columns when the page is empty.
 */
export function markedPageSql(page: string): string {
  return prepared(`
  select m.txid::text as mark_txid, m.id::text as mark_id,
         p.txid::text as txid, p.id::text as id, p.stream, p.type, p.key, p.data::text as data, p.ms
  from commitfeed.trim_mark m left join lateral (${page}) p on true
  order by p.txid, p.id`);
}

/** Runs a markedPageSql statement: its events, in feed order, and the trim mark (START when none). */
export async function readMarkedPage(
  db: Db,
  text: string,
  params: unknown[],
): Promise<{ events: FeedEvent[]; trimMark: Cursor }> {
  const { rows } = await db.executeQuery<Row & { mark_txid: string; mark_id: string }>(
    CompiledQuery.raw(text, params),
  );
  const first = rows[0];
  return {
    events: first === undefined || first.txid === null ? [] : rows.map(toEvent),
    trimMark: trimMarkOf(first),
  };
}
