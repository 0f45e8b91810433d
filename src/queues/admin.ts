/**
 * Queue administration: counts by state, dead letters and their redrive, pause and resume,
 * concurrency limits, one job's status, and cancelling a job.
 */
import { sql } from 'kysely';
import { type Db, inTransaction } from '../db/database.ts';
import { appendEvents } from '../feed/queries/append.ts';
import { wakeEvent } from './wake-stream.ts';

export interface QueueStats {
  name: string;
  paused: boolean;
  /** Most jobs leased at once; null: no limit. */
  concurrency: number | null;
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
    select q.name, q.paused, q.concurrency, q.completed::text as completed,
           count(*) filter (where (j.state = 'ready' and j.run_at <= now())
                               or (j.state = 'leased' and j.lease_expires_at <= now()))::int4 as ready,
           count(*) filter (where j.state = 'ready' and j.run_at > now())::int4 as delayed,
           count(*) filter (where j.state = 'leased' and j.lease_expires_at > now())::int4 as leased,
           count(*) filter (where j.state = 'dead')::int4 as dead,
           extract(epoch from now() - min(j.run_at) filter (where j.state = 'ready' and j.run_at <= now()))::float8 as oldest
    from commitfeed.queues q
    left join commitfeed.jobs j on j.queue = q.name
    where ${queue}::text is null or q.name = ${queue}
    group by q.name, q.paused, q.concurrency, q.completed
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

/**
 * Pauses or resumes `queue`; resuming wakes waiting claimers through the feed. A queue exists once a
 * job was enqueued to it or a setting (concurrency, pause) made it; an unknown one is left alone and
 * the answer is false, so a mistyped name does not become a queue of its own. `create` makes it
 * instead (a webhook endpoint's queue is paused before any job reaches it).
 */
export function setPaused(
  db: Db,
  queue: string,
  paused: boolean,
  opts: { create?: boolean } = {},
): Promise<boolean> {
  return inTransaction(db, async (trx) => {
    const { rows } = opts.create
      ? await sql`
          insert into commitfeed.queues (name, paused) values (${queue}, ${paused})
          on conflict (name) do update set paused = excluded.paused
          returning name`.execute(trx)
      : await sql`update commitfeed.queues set paused = ${paused} where name = ${queue} returning name`.execute(
          trx,
        );
    if (rows.length === 0) return false;
    if (!paused) await appendEvents(trx, [wakeEvent(queue, 'resumed', '{}')]);
    return true;
  });
}

/** A job as GET /v1/queues/{queue}/jobs/{id} shows it. Times are epoch ms (null when not set). */
export interface JobStatus {
  id: string;
  queue: string;
  /** ready (claimable now), delayed (waiting for runAt or a retry backoff), leased, dead, completed,
   * cancelled. A lease that ran out reads as ready (the next claim releases it). */
  state: 'ready' | 'delayed' | 'leased' | 'dead' | 'completed' | 'cancelled';
  payload: string;
  /** JSON text stored with the ack, or null. */
  result: string | null;
  group: string | null;
  key: string | null;
  priority: number;
  attempt: number;
  maxAttempts: number;
  lastError: string | null;
  createdAt: number;
  runAt: number;
  leaseExpiresAt: number | null;
  deadAt: number | null;
  finishedAt: number | null;
}

/** One job of `queue` by id (undefined when there is none: never enqueued, or finished and trimmed). */
export async function getJob(db: Db, queue: string, id: string): Promise<JobStatus | undefined> {
  const ms = (col: string) => sql.raw(`extract(epoch from j.${col})::float8 * 1000`);
  const { rows } = await sql<
    Omit<JobStatus, 'maxAttempts' | 'lastError'> & { max_attempts: number; last_error: string | null }
  >`
    select j.id::text as id, j.queue,
           case when j.state = 'ready' and j.run_at > clock_timestamp() then 'delayed'
                when j.state = 'leased' and j.lease_expires_at <= clock_timestamp() then 'ready'
                else j.state end as state,
           j.payload::text as payload, j.result::text as result, j.group_key as "group", j.key, j.priority,
           j.attempt, j.max_attempts, j.last_error,
           ${ms('created_at')} as "createdAt", ${ms('run_at')} as "runAt",
           ${ms('lease_expires_at')} as "leaseExpiresAt", ${ms('dead_at')} as "deadAt",
           ${ms('finished_at')} as "finishedAt"
    from commitfeed.jobs j
    where j.id = ${id}::int8 and j.queue = ${queue}`.execute(db);
  if (rows.length === 0) return undefined;
  const { max_attempts, last_error, ...r } = rows[0];
  return { ...r, maxAttempts: max_attempts, lastError: last_error };
}

export type CancelResult = { ok: true } | { ok: false; status: 404 | 409; code: string; message: string };

/**
 * Cancels a job that no live lease holds (ready, delayed or dead; a lease that ran out counts as
 * not held): it stays readable as `cancelled` for the job retention and frees its key. A worker
 * holding it must ack or nack instead (409 job_leased). Cancelling the first job of an ordered group
 * lets the next one go: a `cancelled` wake-up row commits with it.
 */
export function cancelJob(db: Db, queue: string, id: string): Promise<CancelResult> {
  return inTransaction(db, async (trx) => {
    const { rows } = await sql<{ group_key: string | null }>`
      update commitfeed.jobs j
      set state = 'cancelled', finished_at = clock_timestamp(), lease = null, lease_expires_at = null
      where j.id = ${id}::int8 and j.queue = ${queue}
        and (j.state in ('ready', 'dead') or (j.state = 'leased' and j.lease_expires_at <= clock_timestamp()))
      returning j.group_key`.execute(trx);
    if (rows.length > 0) {
      if (rows[0].group_key !== null)
        await appendEvents(trx, [wakeEvent(queue, 'cancelled', `{"id":"${id}"}`)]);
      return { ok: true };
    }
    const job = await getJob(trx, queue, id);
    if (!job) {
      return { ok: false, status: 404, code: 'job_not_found', message: `no job ${id} in queue ${queue}` };
    }
    if (job.state === 'leased') {
      return {
        ok: false,
        status: 409,
        code: 'job_leased',
        message: `job ${id} is held by a worker's lease until ${new Date(job.leaseExpiresAt ?? 0).toISOString()}: it can be cancelled once that worker nacks it or its lease runs out`,
      };
    }
    return {
      ok: false,
      status: 409,
      code: job.state === 'completed' ? 'job_completed' : 'job_cancelled',
      message: `job ${id} is ${job.state} already; nothing was changed`,
    };
  });
}

/**
 * Sets the most jobs of `queue` leased at once (null: no limit), creating the queue if needed. A
 * change wakes waiting claimers through the feed (a higher limit lets more go).
 */
export function setConcurrency(db: Db, queue: string, limit: number | null): Promise<void> {
  return inTransaction(db, async (trx) => {
    await sql`
      insert into commitfeed.queues (name, concurrency) values (${queue}, ${limit})
      on conflict (name) do update set concurrency = excluded.concurrency`.execute(trx);
    await appendEvents(trx, [wakeEvent(queue, 'released', `{"jobs":${limit ?? 1}}`)]);
  });
}
