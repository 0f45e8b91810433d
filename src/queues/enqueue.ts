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

const enqueueSql = (fn: string) =>
  prepared(
    `select id::text as id, duplicate from commitfeed.${fn}($1::text[], $2::json[], $3::int4[],
       $4::float8[], $5::timestamptz[], $6::text[], $7::int4[], $8::jsonb[], $9::text[])`,
  );
export const ENQUEUE_SQL = enqueueSql('enqueue_jobs');
const ENQUEUE_UNCHECKED_SQL = enqueueSql('enqueue_jobs_unchecked');

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
export function enqueueJobs(db: Db, jobs: readonly JobInput[]): Promise<EnqueueResult[]> {
  return runEnqueue(db, ENQUEUE_SQL, jobs);
}

/**
 * enqueueJobs for jobs toJobInput() checked already (the group commit): commitfeed.enqueue_jobs_unchecked
 * skips the SQL restatement of the same rules.
 */
export function enqueueCheckedJobs(db: Db, jobs: readonly CheckedJobInput[]): Promise<EnqueueResult[]> {
  return runEnqueue(db, ENQUEUE_UNCHECKED_SQL, jobs);
}

async function runEnqueue(db: Db, text: string, jobs: readonly JobInput[]): Promise<EnqueueResult[]> {
  if (jobs.length === 0) return [];
  const params = columns(jobs, [
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
  const { rows } = await db.executeQuery<{ id: string; duplicate: boolean }>(CompiledQuery.raw(text, params));
  if (rows.length !== jobs.length)
    throw new Error(`commitfeed.enqueue_jobs returned ${rows.length} rows for ${jobs.length} jobs`);
  return rows.map((r, i) => ({ id: r.id, queue: jobs[i].queue, duplicate: r.duplicate }));
}
