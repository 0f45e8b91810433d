// Retention (issue #7): the change feed becomes a table partitioned by time, so history is dropped a
// whole partition at a time (no DELETE, no dead tuples or index bloat under the hot tail query).
// Frozen: never edit after release, add a new migration instead (and never import application code).
//
// - commitfeed.feed: range-partitioned by created_at (clock_timestamp()). Indexes (txid, id) for the
//   tail and (stream, txid, id) for catch-up are declared on the parent, so every partition has them.
//   A unique index on a partitioned table must contain the partition key, so (stream, key) dedup
//   moves to commitfeed.feed_keys (next migration: the write path uses it).
// - feed_default catches rows no partition covers (the janitor fell behind); the janitor keeps
//   partitions created well ahead, so inserts never wait for, or race, a partition being made.
// - Existing rows move over: rows before today (UTC) into feed_history, the rest into daily
//   partitions. The janitor continues the series after the last one with PARTITION_INTERVAL.
// - commitfeed.trim_mark: the highest cursor ever dropped, written in the same transaction as the drop.
import { type Kysely, sql } from 'kysely';

const DAY_MS = 86_400_000;

function partitionName(lower: Date): string {
  // feed_p20260102_000000: the UTC lower bound, so names sort by time.
  const iso = lower.toISOString(); // 2026-01-02T00:00:00.000Z
  return `feed_p${iso.slice(0, 10).replaceAll('-', '')}_${iso.slice(11, 19).replaceAll(':', '')}`;
}

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table commitfeed.feed_new (
      id         bigint not null,
      -- The writer's transaction id: readers only take rows from transactions certainly finished,
      -- in (txid, id) order (see 0001).
      txid       xid8 not null default pg_current_xact_id(),
      stream     text not null,
      type       text,
      key        text,
      data       json not null,
      -- clock_timestamp(): a late-committing row must not be born already old (nor be routed to an
      -- old partition about to be dropped).
      created_at timestamptz not null default clock_timestamp()
    ) partition by range (created_at)`.execute(db);
  await sql`create table commitfeed.feed_default partition of commitfeed.feed_new default`.execute(db);

  const { rows } = await sql<{ now_ms: number }>`
    select extract(epoch from clock_timestamp())::float8 * 1000 as now_ms`.execute(db);
  const today = Math.floor(rows[0].now_ms / DAY_MS) * DAY_MS;
  await sql`
    create table commitfeed.feed_history partition of commitfeed.feed_new
    for values from (minvalue) to (${sql.lit(new Date(today).toISOString())})`.execute(db);
  for (let d = 0; d < 3; d++) {
    const lo = new Date(today + d * DAY_MS);
    const hi = new Date(today + (d + 1) * DAY_MS);
    await sql`
      create table ${sql.id('commitfeed', partitionName(lo))} partition of commitfeed.feed_new
      for values from (${sql.lit(lo.toISOString())}) to (${sql.lit(hi.toISOString())})`.execute(db);
  }

  // Move the rows, and carry the id sequence over (the old one belongs to the old table's identity).
  await sql`
    insert into commitfeed.feed_new (id, txid, stream, type, key, data, created_at)
    select id, txid, stream, type, key, data, created_at from commitfeed.feed`.execute(db);
  const seq = await sql<{ last: string }>`
    select greatest((select last_value from commitfeed.feed_id_seq),
                    (select coalesce(max(id), 0) from commitfeed.feed))::text as last`.execute(db);
  await sql`drop table commitfeed.feed`.execute(db);
  await sql`alter table commitfeed.feed_new rename to feed`.execute(db);
  await sql`create index feed_txid_id_idx on commitfeed.feed (txid, id)`.execute(db);
  await sql`create index feed_stream_idx on commitfeed.feed (stream, txid, id)`.execute(db);
  await sql`create sequence commitfeed.feed_id_seq owned by commitfeed.feed.id`.execute(db);
  const last = seq.rows[0].last;
  if (last !== '0') await sql`select setval('commitfeed.feed_id_seq', ${last}::int8)`.execute(db);
  await sql`alter table commitfeed.feed alter column id set default nextval('commitfeed.feed_id_seq')`.execute(
    db,
  );

  // Idempotency keys, unpartitioned: a key dedups across partitions for DEDUP_WINDOW after its event
  // was appended (the janitor deletes older keys, in small batches: this table only holds keyed events).
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
    insert into commitfeed.feed_keys (stream, key, txid, id, created_at)
    select stream, key, txid, id, created_at from commitfeed.feed where key is not null`.execute(db);

  await sql`
    create table commitfeed.trim_mark (
      singleton  boolean primary key default true check (singleton),
      -- The highest cursor ever dropped: a reader whose cursor is below it may have missed events.
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
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table commitfeed.janitor_runs`.execute(db);
  await sql`drop table commitfeed.trim_mark`.execute(db);
  await sql`drop table commitfeed.feed_keys`.execute(db);
  await sql`alter table commitfeed.feed rename to feed_partitioned`.execute(db);
  await sql`alter index commitfeed.feed_stream_idx rename to feed_partitioned_stream_idx`.execute(db);
  await sql`
    create table commitfeed.feed (
      id bigint generated always as identity, txid xid8 not null default pg_current_xact_id(),
      stream text not null, type text, key text, data json not null,
      created_at timestamptz not null default clock_timestamp(), primary key (txid, id))`.execute(db);
  await sql`
    insert into commitfeed.feed (id, txid, stream, type, key, data, created_at) overriding system value
    select id, txid, stream, type, key, data, created_at from commitfeed.feed_partitioned`.execute(db);
  await sql`select setval(pg_get_serial_sequence('commitfeed.feed', 'id'), (select coalesce(max(id), 1) from commitfeed.feed))`.execute(
    db,
  );
  await sql`drop table commitfeed.feed_partitioned`.execute(db);
  await sql`create index feed_stream_idx on commitfeed.feed (stream, txid, id)`.execute(db);
  await sql`create unique index feed_stream_key_idx on commitfeed.feed (stream, key) where key is not null`.execute(
    db,
  );
}
