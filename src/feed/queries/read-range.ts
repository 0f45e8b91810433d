/**
 * The catch-up read of streams: their events after a cursor up to a position the tailer reached, in
 * feed order, through the (stream, txid, id) index, with the trim mark and the horizon of the same
 * snapshot (marked-page.ts). read-range-frames.ts reads the same page as SSE frames.
 */
import type { Db } from '../../db/database.ts';
import { type Cursor, START, compareCursors } from '../cursor.ts';
import { EVENT_COLUMNS } from './event-columns.ts';
import { type MarkedPage, markedPageSql, readMarkedPage } from './marked-page.ts';

/**
 * The page both catch-up reads (rows and frames) take: events of the streams in $1 after ($2, $3) up
 * to ($4, $5), in feed order, at most $6. One stream uses `=` so the (stream, txid, id) index returns
 * rows already in order. The arguments are rangeArgs().
 */
export function rangePage(columns: string, streams: 'one' | 'any'): string {
  return `select ${columns}
    from commitfeed.feed f
    where ${streams === 'one' ? 'f.stream = $1' : 'f.stream = any($1::text[])'}
      and (f.txid, f.id) > ($2::xid8, $3::int8)
      and (f.txid, f.id) <= ($4::xid8, $5::int8)
    order by f.txid, f.id
    limit $6`;
}

export function rangeArgs(streams: readonly string[], after: Cursor, upTo: Cursor, limit: number): unknown[] {
  return [
    streams.length === 1 ? streams[0] : streams,
    String(after.txid),
    after.id,
    String(upTo.txid),
    upTo.id,
    limit,
  ];
}

export const RANGE_ONE_SQL = markedPageSql(rangePage(EVENT_COLUMNS, 'one'));
const RANGE_ANY_SQL = markedPageSql(rangePage(EVENT_COLUMNS, 'any'));

/**
 * Events of `streams` in (after, upTo], in feed order: the catch-up read. `upTo` must be a position
 * the tailer has reached, so every row up to it is from a finished transaction. `trimMark` (the
 * highest cursor retention has dropped) comes from the same statement, so from the same snapshot as
 * the rows: a reader that finds `after` below it may have missed events (see CatchUpReads.read).
 */
export async function readRange(
  db: Db,
  streams: readonly string[],
  after: Cursor,
  upTo: Cursor,
  limit: number,
  suffix = '',
): Promise<MarkedPage> {
  if (compareCursors(after, upTo) >= 0) return { events: [], trimMark: START, horizon: Infinity };
  const text = streams.length === 1 ? RANGE_ONE_SQL : RANGE_ANY_SQL;
  return readMarkedPage(db, text, rangeArgs(streams, after, upTo, limit), suffix);
}
