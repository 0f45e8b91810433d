// The schema: tables and indexes only. The SQL functions (append, publish, enqueue, ...) are not
// migrations: each lives in one file in src/sql/, applied by the migrator after the migrations.
// Frozen once released: change the schema with a new numbered migration, never by editing this one,
// and never import application code here (the partition naming below is spelled out on purpose).
import { type Kysely, sql } from 'kysely';

const DAY_MS = 86_400_000;

/** feed_p20260102_000000: the partition's UTC lower bound, so names sort by time (as the janitor names them). */
function partitionName(lower: Date): string {
  const iso = lower.toISOString(); // 2026-01-02T00:00:00.000Z
  return `feed_p${iso.slice(0, 10).replaceAll('-', '')}_${iso.slice(11, 19).replaceAll(':', '')}`;
}

export async function up(db: Kysely<unknown>): Promise<void> {
  // The change feed: one append-only table for every stream, partitioned by time so retention drops
  // a whole partition at a time (no DELETE, no dead tuples or index bloat under the hot tail query).
  await sql`create sequence commitfeed.feed_id_seq`.execute(db);
  await sql`
    create table commitfeed.feed (
      id         bigint not null default nextval('commitfeed.feed_id_seq'),
      -- The writer's transaction id: readers only take rows whose txid is below the snapshot's xmin,
      -- i.e. from transactions certainly finished, and order by (txid, id). Ordering by id alone
      -- loses events whose transaction took a lower id but committed later.
      txid       xid8 not null default pg_current_xact_id(),
      stream     text not null,
      type       text,
      key        text,
      -- json, not jsonb: the text is kept as written, so it is served back without re-serialising.
      data       json not null,
      -- clock_timestamp(), not now(): a late-committing row must not be born already old (nor be
      -- routed to an old partition about to be dropped).
      created_at timestamptz not null default clock_timestamp()
    ) partition by range (created_at)`.execute(db);
  await sql`alter sequence commitfeed.feed_id_seq owned by commitfeed.feed.id`.execute(db);
  // feed_default catches rows no partition covers (the janitor fell behind); the janitor keeps
  // partitions created well ahead, so inserts never wait for, or race, a partition being made. It
  // continues the daily series below with PARTITION_INTERVAL.
  await sql`create table commitfeed.feed_default partition of commitfeed.feed default`.execute(db);
  const { rows } = await sql<{ now_ms: number }>`
    select extract(epoch from clock_timestamp())::float8 * 1000 as now_ms`.execute(db);
  const today = Math.floor(rows[0].now_ms / DAY_MS) * DAY_MS;
  await sql`
    create table commitfeed.feed_history partition of commitfeed.feed
    for values from (minvalue) to (${sql.lit(new Date(today).toISOString())})`.execute(db);
  for (let d = 0; d < 3; d++) {
    const lo = new Date(today + d * DAY_MS);
    const hi = new Date(today + (d + 1) * DAY_MS);
    await sql`
      create table ${sql.id('commitfeed', partitionName(lo))} partition of commitfeed.feed
      for values from (${sql.lit(lo.toISOString())}) to (${sql.lit(hi.toISOString())})`.execute(db);
  }
  // Declared on the parent, so every partition has them: (txid, id) for the tail, (stream, txid, id)
  // for per-stream catch-up.
  await sql`create index feed_txid_id_idx on commitfeed.feed (txid, id)`.execute(db);
  await sql`create index feed_stream_idx on commitfeed.feed (stream, txid, id)`.execute(db);

  // Idempotency keys, unpartitioned (a unique index on a partitioned table must contain the partition
  // key): a key dedups across partitions for DEDUP_WINDOW after its event was appended. The janitor
  // deletes older keys in small batches; this table only holds keyed events.
  await sql`
    create table commitfeed.feed_keys (
      stream     text not null,
      key        text not null,
      txid       xid8 not null,
      id         bigint not null,
      created_at timestamptz not null default clock_timestamp(),
      primary key (stream, key)
    )`.execute(db);
  await sql`create index feed_keys_created_idx on commitfeed.feed_keys (created_at)`.execute(db);

  await sql`
    create table commitfeed.trim_mark (
      singleton  boolean primary key default true check (singleton),
      -- The highest cursor ever dropped: a reader whose cursor is below it may have missed events.
      -- Written in the same transaction as the drop.
      txid       xid8 not null default '0',
      id         bigint not null default 0,
      -- When the last drop happened, and the created_at boundary it dropped up to.
      trimmed_at timestamptz,
      trimmed_before timestamptz
    )`.execute(db);
  await sql`insert into commitfeed.trim_mark default values`.execute(db);

  // The last maintenance run (any instance), for operators and metrics.
  await sql`
    create table commitfeed.janitor_runs (
      singleton   boolean primary key default true check (singleton),
      started_at  timestamptz not null,
      duration_ms float8 not null,
      instance    text,
      error       text,
      summary     jsonb
    )`.execute(db);

  // Work queues: one row per queue (pause flag, counters) and one table of jobs for every queue.
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
  await sql`drop table commitfeed.jobs, commitfeed.queues, commitfeed.janitor_runs, commitfeed.trim_mark,
    commitfeed.feed_keys, commitfeed.feed`.execute(db);
}
