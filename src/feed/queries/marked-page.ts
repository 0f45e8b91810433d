/**
 * The shape of every catch-up page (a stream range, a glob's range, a Mercure topic range): the
 * events of `page`, with the trim mark and the statement's own horizon on every row, both taken from
 * the statement that reads the rows (so from the same snapshot). A reader whose cursor is below the
 * mark may have missed events (it is told so); a page read on a standby is kept only when the horizon
 * says its snapshot held every event up to the page's bound (FeedReads.range, horizonCovers).
 */
import { CompiledQuery } from 'kysely';
import type { Db } from '../../db/database.ts';
import { prepared } from '../../db/prepared.ts';
import { type Cursor, START } from '../cursor.ts';
import type { FeedEvent } from '../event.ts';
import { PAGE_COLUMNS, type Row, toEvent } from './event-columns.ts';

/** The statement's own horizon. Catch-up reads return it so that a read on a standby can tell
 * whether its snapshot holds every event up to the page's bound (see reads.ts: horizonCovers). */
export const SNAPSHOT_XMIN = 'pg_snapshot_xmin(pg_current_snapshot())';

export interface MarkedPage {
  events: FeedEvent[];
  /** The highest cursor retention has dropped (START when none). */
  trimMark: Cursor;
  /** The statement's snapshot xmin. */
  horizon: number;
}

/** The trim mark a range statement returns on its first row (`mark_txid`, `mark_id`; START when none). */
export function trimMarkOf(row: { mark_txid?: string | null; mark_id?: string | null } | undefined): Cursor {
  return { txid: Number(row?.mark_txid ?? 0), id: Number(row?.mark_id ?? 0) };
}

/**
 * A prepared statement: the trim mark and the horizon joined to `page`, a select of EVENT_COLUMNS
 * (event-columns.ts) in feed order. It returns one row per event, each carrying the mark, or one row
 * with null event columns when the page is empty.
 */
export function markedPageSql(page: string): string {
  return prepared(`
  select m.txid::text as mark_txid, m.id::text as mark_id, m.xmin::text as xmin,
         p.txid::text as txid, p.id::text as id, ${PAGE_COLUMNS}
  from (select t.txid, t.id, ${SNAPSHOT_XMIN} as xmin from commitfeed.trim_mark t) m
  left join lateral (${page}) p on true
  order by p.txid, p.id`);
}

/** Runs a markedPageSql statement: its events, in feed order, the trim mark and the horizon.
 * `suffix`: the feed's tag as the events' cursors end (history.ts). */
export async function readMarkedPage(
  db: Db,
  text: string,
  params: unknown[],
  suffix = '',
): Promise<MarkedPage> {
  const { rows } = await db.executeQuery<Row & { mark_txid: string; mark_id: string; xmin: string }>(
    CompiledQuery.raw(text, params),
  );
  const first = rows[0];
  if (first === undefined) return { events: [], trimMark: START, horizon: 0 };
  return {
    events: first.txid === null ? [] : rows.map((r) => toEvent(r, suffix)),
    trimMark: trimMarkOf(first),
    horizon: Number(first.xmin),
  };
}
