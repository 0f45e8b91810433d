// Ordered groups, per-queue concurrency limits, and job status kept after completion.
// Frozen once released; never import application code here.
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    alter table commitfeed.jobs
      -- Jobs of one group are handed out one at a time, in id (enqueue) order.
      add column group_key   text,
      -- The worker's answer, stored with the ack (bounded by the service).
      add column result      json,
      -- When it was completed or cancelled; the janitor deletes it once older than the retention.
      add column finished_at timestamptz`.execute(db);
  // 'completed' and 'cancelled' jobs stay visible (GET a job by id) until the janitor removes them.
  await sql`alter table commitfeed.jobs drop constraint jobs_state_check`.execute(db);
  await sql`
    alter table commitfeed.jobs add constraint jobs_state_check
      check (state in ('ready', 'leased', 'dead', 'completed', 'cancelled'))`.execute(db);
  // A key is taken while its job is not finished: a completed or cancelled job frees it.
  await sql`drop index commitfeed.jobs_key_idx`.execute(db);
  await sql`
    create unique index jobs_key_idx on commitfeed.jobs (queue, key)
      where key is not null and state in ('ready', 'leased', 'dead')`.execute(db);
  // Is a job the first of its group still to run? (the claim's probe for grouped jobs)
  await sql`
    create index jobs_group_idx on commitfeed.jobs (queue, group_key, id)
      where group_key is not null and state in ('ready', 'leased')`.execute(db);
  await sql`
    create index jobs_finished_idx on commitfeed.jobs (finished_at)
      where state in ('completed', 'cancelled')`.execute(db);
  // Most jobs of the queue leased at once (null: no limit).
  await sql`
    alter table commitfeed.queues add column concurrency integer check (concurrency > 0)`.execute(db);
  // The SQL functions gain parameters (a group): the migrator re-creates them after this, and the
  // old signatures must go so that calls resolve to one function.
  await sql`drop function if exists commitfeed.enqueue(text, jsonb, double precision, integer, text, integer, timestamptz, jsonb)`.execute(
    db,
  );
  await sql`drop function if exists commitfeed.enqueue_jobs(text[], json[], integer[], double precision[], timestamptz[], text[], integer[], jsonb[])`.execute(
    db,
  );
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`delete from commitfeed.jobs where state in ('completed', 'cancelled')`.execute(db);
  await sql`drop index commitfeed.jobs_finished_idx`.execute(db);
  await sql`drop index commitfeed.jobs_group_idx`.execute(db);
  await sql`drop index commitfeed.jobs_key_idx`.execute(db);
  await sql`create unique index jobs_key_idx on commitfeed.jobs (queue, key) where key is not null`.execute(
    db,
  );
  await sql`alter table commitfeed.jobs drop constraint jobs_state_check`.execute(db);
  await sql`
    alter table commitfeed.jobs add constraint jobs_state_check
      check (state in ('ready', 'leased', 'dead'))`.execute(db);
  await sql`alter table commitfeed.jobs drop column group_key, drop column result, drop column finished_at`.execute(
    db,
  );
  await sql`alter table commitfeed.queues drop column concurrency`.execute(db);
}
