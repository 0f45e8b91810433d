/**
 * Queue administration: counts by state, dead letters and their redrive, pause and resume.
 */
import { sql } from 'kysely';
import { type Db, inTransaction } from '../db/database.ts';
import { appendEvents } from '../feed/queries.ts';
import { wakeEvent } from './wake-stream.ts';

export interface QueueStats {
  name: string;
  paused: boolean;
  /** Claimable now (expired leases included: the next claim releases them). */
  ready: number;
  /** Waiting for their run time (delay, runAt or a retry backoff). */
  delayed: number;
  /** Held by a live lease. */
  leased: number;
  dead: number;
  /** Acked since the queue was created. */
  completed: number;
  /** Seconds the oldest claimable job has been waiting (0 when none). */
  oldestReadyAgeSeconds: number;
}

/** Counts by state for one queue (undefined when it does not exist) or for every queue. */
export async function queueStats(db: Db, queue: string | null): Promise<QueueStats[]> {
  // As returned: `completed` is int8 (text, to keep precision past 2^53 until converted), `oldest` null
  // when nothing is ready.
  const { rows } = await sql<
    Omit<QueueStats, 'completed' | 'oldestReadyAgeSeconds'> & { completed: string; oldest: number | null }
  >`
    select q.name, q.paused, q.completed::text as completed,
           count(*) filter (where (j.state = 'ready' and j.run_at <= now())
                               or (j.state = 'leased' and j.lease_expires_at <= now()))::int4 as ready,
           count(*) filter (where j.state = 'ready' and j.run_at > now())::int4 as delayed,
           count(*) filter (where j.state = 'leased' and j.lease_expires_at > now())::int4 as leased,
           count(*) filter (where j.state = 'dead')::int4 as dead,
           extract(epoch from now() - min(j.run_at) filter (where j.state = 'ready' and j.run_at <= now()))::float8 as oldest
    from commitfeed.queues q
    left join commitfeed.jobs j on j.queue = q.name
    where ${queue}::text is null or q.name = ${queue}
    group by q.name, q.paused, q.completed
    order by q.name`.execute(db);
  return rows.map(({ completed, oldest, ...counts }) => ({
    ...counts,
    completed: Number(completed),
    oldestReadyAgeSeconds: Math.max(0, oldest ?? 0),
  }));
}

export interface DeadJob {
  id: string;
  payload: string;
  attempt: number;
  maxAttempts: number;
  lastError: string | null;
  /** epoch ms */
  createdAt: number;
  deadAt: number;
}

/** Dead jobs of `queue` after id `after`, oldest first. */
export async function listDead(
  db: Db,
  queue: string,
  after: string | null,
  limit: number,
): Promise<DeadJob[]> {
  const { rows } = await sql<{
    id: string;
    payload: string;
    attempt: number;
    max_attempts: number;
    last_error: string | null;
    created_ms: number;
    dead_ms: number;
  }>`
    select j.id::text as id, j.payload::text as payload, j.attempt, j.max_attempts, j.last_error,
           extract(epoch from j.created_at)::float8 * 1000 as created_ms,
           extract(epoch from j.dead_at)::float8 * 1000 as dead_ms
    from commitfeed.jobs j
    where j.queue = ${queue} and j.state = 'dead' and j.id > ${after ?? '0'}::int8
    order by j.id
    limit ${limit}`.execute(db);
  return rows.map((r) => ({
    id: r.id,
    payload: r.payload,
    attempt: r.attempt,
    maxAttempts: r.max_attempts,
    lastError: r.last_error,
    createdAt: r.created_ms,
    deadAt: r.dead_ms,
  }));
}

/**
 * Redrives dead jobs of `queue` (one by id, or all when `id` is null): ready now with a fresh set of
 * attempts; their last error is kept until they fail again. Wakes claimers through the feed. Returns
 * the ids redriven.
 */
export function retryDead(db: Db, queue: string, id: string | null): Promise<string[]> {
  return inTransaction(db, async (trx) => {
    const { rows } = await sql<{ id: string }>`
      update commitfeed.jobs j
      set state = 'ready', attempt = 0, run_at = clock_timestamp(), dead_at = null, lease = null
      where j.queue = ${queue} and j.state = 'dead' and (${id}::int8 is null or j.id = ${id}::int8)
      returning j.id::text as id`.execute(trx);
    if (rows.length > 0) await appendEvents(trx, [wakeEvent(queue, 'enqueued', `{"jobs":${rows.length}}`)]);
    return rows.map((r) => r.id);
  });
}

/** Pauses or resumes `queue` (creating it if needed). Resuming wakes waiting claimers through the feed. */
export function setPaused(db: Db, queue: string, paused: boolean): Promise<void> {
  return inTransaction(db, async (trx) => {
    await sql`
      insert into commitfeed.queues (name, paused) values (${queue}, ${paused})
      on conflict (name) do update set paused = excluded.paused`.execute(trx);
    if (!paused) await appendEvents(trx, [wakeEvent(queue, 'resumed', '{}')]);
  });
}
