/**
 * Read-only statistics for the stream list (GET /v1/streams and the live page). Bounded on purpose:
 * an exact count per stream would scan the whole feed, so counts come from the most recent `window`
 * rows (a backward walk of the primary key), and names from a skip scan of the (stream, txid, id)
 * index: one index probe per distinct stream, however many events each stream holds.
 *
 * Only user streams are listed: internal streams (queue wake-ups, `queue/<name>`; a '/' is never in
 * a user stream name) are stepped over by the skip scan (one probe each) and neither listed nor
 * counted toward `limit`, so a listing reveals no queue names.
 */
import { sql } from 'kysely';
import type { Db } from '../db/database.ts';

export interface StreamStats {
  name: string;
  /** Events of this stream among the feed's most recent `window` events. */
  recent: number;
  /** Events of this stream in the last 60 s (within the same window). */
  lastMinute: number;
  lastEventAt: string | null;
  /** Event types seen in the window (untyped events are not listed). */
  types: string[];
}

/**
 * Up to `limit` user stream names (alphabetical) with their recent activity. Cost: `limit` index
 * probes (plus one per internal stream on the way) and one read of `window` rows; it never scans
 * the feed.
 *
 * @example
 *   const { streams } = await listStreams(db, { limit: 100, window: 10_000 });
 */
export async function listStreams(
  db: Db,
  opts: { limit: number; window: number },
): Promise<{ streams: StreamStats[]; more: boolean }> {
  const { rows } = await sql<{
    name: string;
    recent: string | null;
    last_minute: string | null;
    last_at: Date | null;
    types: string[] | null;
  }>`
    with recursive names(stream, n) as (
      (select stream, case when strpos(stream, '/') > 0 then 0 else 1 end
       from commitfeed.feed order by stream limit 1)
      union all
      select next.stream, names.n + case when strpos(next.stream, '/') > 0 then 0 else 1 end
      from names
      cross join lateral (
        select (select f.stream from commitfeed.feed f where f.stream > names.stream order by f.stream limit 1)
          as stream
      ) next
      where names.stream is not null and names.n <= ${opts.limit}
    ),
    recent as (
      select f.stream, f.type, f.created_at
      from commitfeed.feed f
      order by f.txid desc, f.id desc
      limit ${opts.window}
    ),
    stats as (
      select r.stream, count(*) as recent,
             count(*) filter (where r.created_at > clock_timestamp() - interval '60 seconds') as last_minute,
             max(r.created_at) as last_at,
             array_agg(distinct r.type) filter (where r.type is not null) as types
      from recent r
      group by r.stream
    )
    select names.stream as name, stats.recent::text as recent, stats.last_minute::text as last_minute,
           stats.last_at, stats.types
    from names left join stats on stats.stream = names.stream
    where names.stream is not null and strpos(names.stream, '/') = 0
    order by names.stream`.execute(db);
  const more = rows.length > opts.limit;
  return {
    more,
    streams: rows.slice(0, opts.limit).map((r) => ({
      name: r.name,
      recent: Number(r.recent ?? 0),
      lastMinute: Number(r.last_minute ?? 0),
      lastEventAt: r.last_at ? new Date(r.last_at).toISOString() : null,
      types: r.types ?? [],
    })),
  };
}
