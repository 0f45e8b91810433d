/**
 * Queue history retention, for the janitor. The queues' schema (migrations/0001_baseline.ts) keeps no
 * completed history in the hot table — an ack deletes the job and counts it in
 * commitfeed.queues.completed — so the only history that grows is dead jobs (out of attempts, kept
 * for inspection and redrive). Those are deleted once `dead_at` is older than the retention, in small
 * batches keyed by id (the jobs_dead_idx partial index), so a backlog of dead letters never turns into
 * one long DELETE holding locks and bloating the claim index. Their queue wake-up rows live in the
 * feed and go with its partitions.
 */
import { sql } from 'kysely';
import type { Db } from '../db/database.ts';

/** Deletes dead jobs whose dead_at is before `before`; 0 when the queues schema is not installed. */
export async function trimDeadJobs(db: Db, before: Date, batch = 1000, maxBatches = 100): Promise<number> {
  const { rows } = await sql<{ ok: boolean }>`
    select to_regclass('commitfeed.jobs') is not null as ok`.execute(db);
  if (!rows[0].ok) return 0;
  let total = 0;
  for (let i = 0; i < maxBatches; i++) {
    const { numAffectedRows } = await sql`
      delete from commitfeed.jobs j
      where j.id = any (array(select d.id from commitfeed.jobs d
                              where d.state = 'dead' and d.dead_at < ${before.toISOString()}::timestamptz
                              order by d.id limit ${batch}))
        and j.state = 'dead'`.execute(db);
    const n = Number(numAffectedRows ?? 0);
    total += n;
    if (n < batch) break;
  }
  return total;
}
