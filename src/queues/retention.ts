/**
 * Queue history retention, a task the janitor runs (queueRetention below). Two kinds of job history grow in the jobs table: dead
 * jobs (out of attempts, kept for inspection and redrive) and finished ones (completed or cancelled,
 * kept so their status and result can be read). Each is deleted once older than its retention —
 * `dead_at` against RETENTION, `finished_at` against JOB_RETENTION — in small batches keyed by a
 * partial index (jobs_dead_idx, jobs_finished_idx), so a backlog never turns into one long DELETE
 * holding locks. The claim's indexes cover only ready and leased jobs, so this history never slows a
 * claim. Their queue wake-up rows live in the feed and go with its partitions.
 */
import { type RawBuilder, sql } from 'kysely';
import type { Config } from '../config/config.ts';
import type { Db } from '../db/database.ts';
import type { JanitorTask } from '../retention/janitor.ts';

/** The janitor's queue step: dead jobs past RETENTION, completed and cancelled ones past JOB_RETENTION. */
export function queueRetention(opts: Pick<Config, 'retentionMs' | 'jobRetentionMs'>): JanitorTask {
  return {
    name: 'queues',
    run: async (db, now) => ({
      deadJobs: await trimDeadJobs(db, new Date(now.getTime() - opts.retentionMs)),
      finishedJobs: await trimFinishedJobs(db, new Date(now.getTime() - opts.jobRetentionMs)),
    }),
  };
}

type Condition = (alias: 'd' | 'j') => RawBuilder<unknown>;

/** Deletes jobs matching `old` (a condition with an index to find them; re-checked as it deletes), in batches. */
async function trimJobs(db: Db, old: Condition, batch: number, maxBatches: number): Promise<number> {
  const { rows } = await sql<{ ok: boolean }>`
    select to_regclass('commitfeed.jobs') is not null as ok`.execute(db);
  if (!rows[0].ok) return 0;
  let total = 0;
  for (let i = 0; i < maxBatches; i++) {
    const { numAffectedRows } = await sql`
      delete from commitfeed.jobs j
      where j.id = any (array(select d.id from commitfeed.jobs d where ${old('d')} limit ${batch}))
        and ${old('j')}`.execute(db);
    const n = Number(numAffectedRows ?? 0);
    total += n;
    if (n < batch) break;
  }
  return total;
}

/** Deletes dead jobs whose dead_at is before `before`; 0 when the queues schema is not installed. */
export function trimDeadJobs(db: Db, before: Date, batch = 1000, maxBatches = 100): Promise<number> {
  const at = before.toISOString();
  return trimJobs(
    db,
    (t) => sql`${sql.ref(t)}.state = 'dead' and ${sql.ref(t)}.dead_at < ${at}::timestamptz`,
    batch,
    maxBatches,
  );
}

/** Deletes completed and cancelled jobs that finished before `before`. */
export function trimFinishedJobs(db: Db, before: Date, batch = 1000, maxBatches = 100): Promise<number> {
  const at = before.toISOString();
  return trimJobs(
    db,
    (t) =>
      sql`${sql.ref(t)}.state in ('completed', 'cancelled') and ${sql.ref(t)}.finished_at < ${at}::timestamptz`,
    batch,
    maxBatches,
  );
}
