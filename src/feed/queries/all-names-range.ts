/**
 * The catch-up read of stream globs (`GET /v1/events?stream=orders.*`, src/streams/glob.ts): every
 * event of every named stream after a cursor up to a position the tailer reached, in feed order, for
 * the glob to filter in process.
 */
import type { Db } from '../../db/database.ts';
import type { Cursor } from '../cursor.ts';
import { EVENT_COLUMNS } from './event-columns.ts';
import { type MarkedPage, markedPageSql, readMarkedPage } from './marked-page.ts';

// Names only: a row of an internal stream (with a `/`) is never read for a glob.
const ALL_NAMES_RANGE_SQL = markedPageSql(`
    select ${EVENT_COLUMNS}
    from commitfeed.feed f
    where (f.txid, f.id) > ($1::xid8, $2::int8) and (f.txid, f.id) <= ($3::xid8, $4::int8)
      and strpos(f.stream, '/') = 0
    order by f.txid, f.id
    limit $5`);

/** Events of every named stream in (after, upTo], at most `limit`, with the trim mark and the horizon. */
export function readAllNamesRange(
  db: Db,
  after: Cursor,
  upTo: Cursor,
  limit: number,
  suffix = '',
): Promise<MarkedPage> {
  return readMarkedPage(
    db,
    ALL_NAMES_RANGE_SQL,
    [String(after.txid), after.id, String(upTo.txid), upTo.id, limit],
    suffix,
  );
}
