// Work queues: one table of jobs for every queue, and one row per queue (pause flag, counters). Frozen:
// never edit after release, add a new migration instead (and never import application code here).
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table commitfeed.queues (
      name       text primary key,
      -- A paused queue accepts jobs and hands none out.
      paused     boolean not null default false,
      -- Acked jobs leave the jobs table (so the claim query stays fast as history grows); this counts them.
      completed  bigint not null default 0,
      created_at timestamptz not null default clock_timestamp()
    )`.execute(db);
  await sql`
    create table commitfeed.jobs (
      id               bigint generated always as identity primary key,
      queue            text not null,
      -- json, not jsonb: served back to workers byte for byte, without re-serialising.
      payload          json not null,
      priority         integer not null default 0,
      -- 'ready': claimable from run_at (a future run_at is a delayed job); 'leased': held until
      -- lease_expires_at, then claimable again; 'dead': out of attempts, kept for inspection and redrive.
      state            text not null default 'ready' check (state in ('ready', 'leased', 'dead')),
      run_at           timestamptz not null default clock_timestamp(),
      -- Claims so far, the current one included.
      attempt          integer not null default 0,
      max_attempts     integer not null default 5,
      -- {"type": "exponential" | "fixed", "delay": seconds, "max": seconds, "jitter": boolean}
      backoff          jsonb not null,
      key              text,
      -- Fencing token of the current claim: ack/nack/extend must present it.
      lease            uuid,
      lease_expires_at timestamptz,
      last_error       text,
      created_at       timestamptz not null default clock_timestamp(),
      dead_at          timestamptz
    )`.execute(db);
  // The claim: ready jobs of one queue by priority, then age.
  await sql`create index jobs_claim_idx on commitfeed.jobs (queue, priority, run_at, id) where state = 'ready'`.execute(
    db,
  );
  // When the next delayed job comes due (a waiting claim's timer).
  await sql`create index jobs_due_idx on commitfeed.jobs (queue, run_at) where state = 'ready'`.execute(db);
  // Expired leases (crash recovery) and the next lease expiry.
  await sql`create index jobs_lease_idx on commitfeed.jobs (queue, lease_expires_at) where state = 'leased'`.execute(
    db,
  );
  await sql`create index jobs_dead_idx on commitfeed.jobs (queue, id) where state = 'dead'`.execute(db);
  // Dedup: a key is taken while its job exists (ready, leased or dead); an ack deletes the row and frees it.
  await sql`create unique index jobs_key_idx on commitfeed.jobs (queue, key) where key is not null`.execute(
    db,
  );
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table commitfeed.jobs`.execute(db);
  await sql`drop table commitfeed.queues`.execute(db);
}
