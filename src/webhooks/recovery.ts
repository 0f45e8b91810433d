/**
 * Recovery: resend one event, resend the deliveries that failed (used every attempt) since a time,
 * replay from a cursor or from the start of retention. Resends make new jobs from the feed (the
 * event as committed, with the same `webhook-id`), so a receiver deduplicating on it sees it once.
 */
import { sql } from 'kysely';
import { type Db, inTransaction } from '../db/database.ts';
import { type Cursor, START, compareCursors } from '../feed/cursor.ts';
import { readTrimMark } from '../feed/queries/trim-mark.ts';
import { moveStreamSubscriptionCursor } from '../flows/stream-subscriptions.ts';
import { retryDead } from '../queues/admin.ts';

/**
 * Enqueues the event `eventId` again for the endpoint's stream subscription `sub` (if it is one of
 * its streams and types). Returns the new job's id; null when no retained event matches.
 */
export async function resendEvent(db: Db, sub: string, eventId: Cursor): Promise<string | null> {
  const { rows } = await sql<{ id: string }>`
    select j.id::text as id
    from commitfeed.subscriptions s
    join commitfeed.feed f on f.txid = ${String(eventId.txid)}::xid8 and f.id = ${eventId.id}::int8
      and f.stream ~ s.pattern and (s.types is null or f.type = any (s.types))
    cross join lateral commitfeed.enqueue_jobs(array[s.queue],
      array[commitfeed.follow_payload(s.name, f.stream, f.type, f.key, f.txid, f.id,
        commitfeed.cursor_suffix(), f.created_at, f.data)],
      array[s.priority], array[0::float8], array[null::timestamptz], array[null::text], array[s.max_attempts],
      array[s.backoff], array[s.group_key]) j
    where s.name = ${sub}`.execute(db);
  return rows[0]?.id ?? null;
}

/** Makes the failed deliveries of `queue` that failed at or after `since` ready again, with fresh attempts. */
export function resendFailed(db: Db, queue: string, since: Date): Promise<number> {
  return inTransaction(db, async (trx) => {
    const { rows } = await sql<{ id: string }>`
      select j.id::text as id from commitfeed.jobs j
      where j.queue = ${queue} and j.state = 'dead' and j.dead_at >= ${since.toISOString()}::timestamptz
      -- In job order (each retry's run_at is the order claims take them again); qualified, as a bare
      -- \`id\` would name the text output and put job 10 before job 9.
      order by j.id for update`.execute(trx);
    for (const r of rows) await retryDead(trx, queue, r.id);
    return rows.length;
  });
}

/**
 * Moves the stream subscription's cursor to `from` (START for the first retained event): every
 * matching event after it is delivered again. `lost` is true when retention has already dropped
 * events after `from` — they cannot be delivered, and the caller is told, never left to assume.
 */
export async function replayFrom(
  db: Db,
  sub: string,
  from: Cursor | 'earliest',
): Promise<{ moved: boolean; lost: boolean; trimMark: Cursor }> {
  const { mark } = await readTrimMark(db);
  const to = from === 'earliest' ? START : from;
  const lost = from !== 'earliest' && compareCursors(to, mark) < 0;
  const moved = await moveStreamSubscriptionCursor(db, sub, to);
  return { moved, lost, trimMark: mark };
}
