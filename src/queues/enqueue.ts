/**
 * Enqueue: job rows plus one wake-up row per queue, in the caller's transaction (or a statement of
 * its own), through the SQL function commitfeed.enqueue_jobs (src/sql/enqueue-jobs.sql), the one
 * implementation of enqueueing that commitfeed.enqueue (applications' own transactions) calls too.
 *
 * States: 'ready' (claimable from run_at: a future run_at is a delayed job), 'leased' (held until
 * lease_expires_at, then claimable again), 'dead' (out of attempts), 'completed' (acked) and
 * 'cancelled', the last two kept for the job retention window (then deleted by the janitor). An ack
 * also counts the job in commitfeed.queues.completed. The claim's indexes cover only ready and leased
 * jobs, so finished ones cost the claim nothing.
 */
import { CompiledQuery } from 'kysely';
import { columns } from '../db/columns.ts';
import type { Db } from '../db/database.ts';
import { prepared } from '../db/prepared.ts';

/** One job to enqueue, already validated (see validate.ts). */
export interface JobInput {
  queue: string;
  /** JSON text, stored and served back byte for byte. */
  payload: string;
  priority: number;
  /** Seconds from now; 0 when runAt is set. */
  delay: number;
  /** ISO timestamp, or null. */
  runAt: string | null;
  key: string | null;
  maxAttempts: number;
  /** Normalised backoff as JSON text: {"type","delay","max","jitter"}. */
  backoff: string;
  /** Ordered group: the group's jobs are handed out one at a time, in enqueue order. */
  group: string | null;
}

declare const checkedJob: unique symbol;
/** A job toJobInput() accepted: only such jobs may skip the SQL checks (enqueueCheckedJobs). */
export type CheckedJobInput = JobInput & { readonly [checkedJob]: true };

export interface EnqueueResult {
  id: string;
  queue: string;
  /** True when `key` matched a job of the queue not yet completed: nothing was enqueued. */
  duplicate: boolean;
}

export const ENQUEUE_SQL = prepared(
  `select id::text as id, duplicate from commitfeed.enqueue_jobs($1::text[], $2::json[], $3::int4[],
     $4::float8[], $5::timestamptz[], $6::text[], $7::int4[], $8::jsonb[], $9::text[])`,
);
const ENQUEUE_UNCHECKED_SQL = prepared(
  `select id::text as id, duplicate, lease::text as lease, lease_expires_ms
   from commitfeed.enqueue_jobs_unchecked($1::text[], $2::json[], $3::int4[], $4::float8[], $5::timestamptz[],
     $6::text[], $7::int4[], $8::jsonb[], $9::text[], $10::float8[])`,
);

/**
 * Enqueues jobs in one statement and appends one wake-up row per queue to the feed (stream
 * `queue/<name>`, type `enqueued`, data `{"jobs":<n>}`), whose pg_notify is delivered at the commit of
 * `db`'s transaction: waiting claimers wake exactly when the jobs become visible, and never for a
 * rolled-back enqueue. Jobs whose `key` matches a job of their queue not yet completed (or an
 * earlier job of the call) are not enqueued: their result carries the existing id and
 * `duplicate: true`.
 *
 * @example
 *   await db.transaction().execute(async (trx) => {
 *     await trx.insertInto('orders').values(order).execute();
 *     await enqueueJobs(trx, [toJobInput('emails', { payload: { to } }, maxBytes)]);
 *   });
 */
export async function enqueueJobs(db: Db, jobs: readonly JobInput[]): Promise<EnqueueResult[]> {
  if (jobs.length === 0) return [];
  const { rows } = await db.executeQuery<{ id: string; duplicate: boolean }>(
    CompiledQuery.raw(ENQUEUE_SQL, jobColumns(jobs)),
  );
  return results(jobs, rows);
}

/** An enqueued job handed straight to a waiting claim: the lease the enqueue gave it. */
export interface HandedOff {
  lease: string;
  /** epoch milliseconds */
  leaseExpiresAt: number;
}

/** What the group commit learns of each job: its result, and the lease if it was handed off. */
export type EnqueueOutcome = EnqueueResult & { handedOff?: HandedOff };

/**
 * enqueueJobs for jobs toJobInput() checked already (the group commit), through
 * commitfeed.enqueue_jobs_unchecked (no SQL restatement of the same rules). `leases[i]`, when given,
 * is the lease in seconds of a claim of this process waiting for job i: the job is inserted leased
 * (if its queue is neither paused nor limited) and its result carries `handedOff`.
 */
export async function enqueueCheckedJobs(
  db: Db,
  jobs: readonly CheckedJobInput[],
  leases: readonly (number | null)[] | null = null,
): Promise<EnqueueOutcome[]> {
  if (jobs.length === 0) return [];
  const { rows } = await db.executeQuery<{
    id: string;
    duplicate: boolean;
    lease: string | null;
    lease_expires_ms: number | null;
  }>(CompiledQuery.raw(ENQUEUE_UNCHECKED_SQL, [...jobColumns(jobs), leases]));
  return results(jobs, rows).map((r, i) =>
    rows[i].lease === null
      ? r
      : { ...r, handedOff: { lease: rows[i].lease!, leaseExpiresAt: rows[i].lease_expires_ms! } },
  );
}

function jobColumns(jobs: readonly JobInput[]): unknown[] {
  return columns(jobs, [
    'queue',
    'payload',
    'priority',
    'delay',
    'runAt',
    'key',
    'maxAttempts',
    'backoff',
    'group',
  ]);
}

function results(
  jobs: readonly JobInput[],
  rows: readonly { id: string; duplicate: boolean }[],
): EnqueueResult[] {
  if (rows.length !== jobs.length)
    throw new Error(`commitfeed.enqueue_jobs returned ${rows.length} rows for ${jobs.length} jobs`);
  return rows.map((r, i) => ({ id: r.id, queue: jobs[i].queue, duplicate: r.duplicate }));
}
