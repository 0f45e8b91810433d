/**
 * Retention and stream subscriptions: events dropped before a stream subscription turned them into
 * jobs are counted, per stream subscription, in the transaction that drops them — never silently
 * skipped. The count lands on the stream subscription (`lost_events`, `last_loss`: its status over
 * HTTP and /metrics) and the janitor logs it.
 *
 * The janitor's drop hook (DropHook in src/retention/partitions.ts): dropPartition and
 * trimDefaultPartition call it before their drop or delete, inside their transaction. The stream
 * subscriptions' rows are locked first, in a statement of their own, so the count (the next
 * statement, a fresh snapshot) sees every cursor a follow step committed meanwhile: an event that
 * became a job is not reported lost. Lock order is the follower's: the feed, then the stream
 * subscriptions' rows.
 */
import { type RawBuilder, sql } from 'kysely';
import type { Db } from '../db/database.ts';
import type { Loss } from '../retention/partitions.ts';

/**
 * Counts, per stream subscription, the rows of `rows` (a subquery of feed rows with stream, type,
 * txid, id) past its cursor, and adds them to its lost events; `where` names the rows in `last_loss`.
 */
export async function recordLostEvents(trx: Db, rows: RawBuilder<unknown>, where: string): Promise<Loss[]> {
  await sql`select 1 from commitfeed.subscriptions order by name for update`.execute(trx);
  const { rows: lost } = await sql<{ name: string; n: string }>`
    with lost as (
      select s.name, count(*) as n
      from commitfeed.subscriptions s
      join (${rows}) p on (case when s.pattern is null then p.stream = s.stream else p.stream ~ s.pattern end)
                      and (s.type is null or p.type = s.type) and (s.types is null or p.type = any (s.types))
                      and (p.txid, p.id) > (s.cursor_txid, s.cursor_id)
      group by s.name
    )
    update commitfeed.subscriptions s
    set lost_events = s.lost_events + lost.n,
        last_loss = jsonb_build_object('at', clock_timestamp(), 'events', lost.n, 'partition', ${where}::text)
    from lost where s.name = lost.name
    returning s.name, lost.n::text as n`.execute(trx);
  return lost.map((r) => ({ subscription: r.name, events: Number(r.n) }));
}
