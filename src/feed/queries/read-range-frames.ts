/**
 * readRange() for SSE (read-range.ts): the same rows as one string of SSE frames built by
 * PostgreSQL (see frames.ts), so this process passes the bytes through.
 */
import { CompiledQuery } from 'kysely';
import type { Db } from '../../db/database.ts';
import { prepared } from '../../db/prepared.ts';
import type { Cursor } from '../cursor.ts';
import { lastFrameCursor, namedSseFrameSql, sseFrameSql } from '../frames.ts';
import { SNAPSHOT_XMIN, trimMarkOf } from './marked-page.ts';
import { rangeArgs, rangePage } from './read-range.ts';

function rangeFramesSql(streams: 'one' | 'any'): string {
  // The aggregate reads the ordered subquery in order (no join in between), so string_agg keeps
  // feed order without an ORDER BY of its own, which would sort the page again.
  return prepared(`
  select (select m.txid::text from commitfeed.trim_mark m) as mark_txid, ${SNAPSHOT_XMIN}::text as xmin,
         (select m.id::text from commitfeed.trim_mark m) as mark_id,
         count(*)::int as fetched,
         count(*) filter (where octet_length(q.frame) > $7)::int as big,
         coalesce(string_agg(q.frame, '') filter (where octet_length(q.frame) <= $7), '') as frames
  from (${rangePage(`${streams === 'one' ? sseFrameSql('$8') : namedSseFrameSql('$8')} as frame`, streams)}) q`);
}
const RANGE_FRAMES_ONE_SQL = rangeFramesSql('one');
const RANGE_FRAMES_ANY_SQL = rangeFramesSql('any');

export interface FramesPage {
  /** The events' SSE frames, concatenated in feed order; null when one frame was larger than
   * `maxFrameBytes` (the caller reads the page as rows instead: see CatchUpReads.readFrames). */
  frames: string | null;
  count: number;
  /** The last event's cursor (null: none). */
  last: Cursor | null;
  /** The page stopped at `limit`: more events may follow `last` before `upTo`. */
  more: boolean;
  trimMark: Cursor;
  /** The statement's snapshot xmin. */
  horizon: number;
}

/**
 * The events of `streams` in (after, upTo] as SSE frames. A page holds at most `limit` frames of at
 * most `maxFrameBytes` each, so the string stays bounded however large events are. `suffix`: the
 * feed's tag as the frames' ids end (history.ts).
 */
export async function readRangeFrames(
  db: Db,
  streams: readonly string[],
  after: Cursor,
  upTo: Cursor,
  limit: number,
  maxFrameBytes: number,
  suffix = '',
): Promise<FramesPage> {
  const text = streams.length === 1 ? RANGE_FRAMES_ONE_SQL : RANGE_FRAMES_ANY_SQL;
  const { rows } = await db.executeQuery<{
    mark_txid: string | null;
    mark_id: string | null;
    fetched: number;
    big: number;
    frames: string;
    xmin: string;
  }>(CompiledQuery.raw(text, [...rangeArgs(streams, after, upTo, limit), maxFrameBytes, suffix]));
  const r = rows[0];
  const trimMark = trimMarkOf(r);
  const more = r.fetched === limit;
  const horizon = Number(r.xmin);
  if (r.big > 0) return { frames: null, count: r.fetched, last: null, more, trimMark, horizon };
  return { frames: r.frames, count: r.fetched, last: lastFrameCursor(r.frames), more, trimMark, horizon };
}
