// Flows into queues: stream subscriptions (every event of a stream becomes one job) and cron
// schedules (every tick becomes one job). Tables and indexes only; the follower's SQL is in
// src/sql/follow-subscription.sql. Frozen once released; never import application code here.
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // A durable cursor over the feed, like a JetStream consumer: the follower reads the stream's events
  // after (cursor_txid, cursor_id) from finished transactions only, enqueues them and advances the
  // cursor in ONE transaction, so every event becomes exactly one job whoever runs the follower.
  await sql`
    create table commitfeed.subscriptions (
      name         text primary key,
      -- What it follows: today one stream by name (match = 'stream'); a pattern kind can be added
      -- beside it without changing the cursor or the follower's transaction.
      match        text not null default 'stream' check (match in ('stream')),
      stream       text not null,
      -- Only events of this type (null: every event of the stream).
      type         text,
      queue        text not null,
      priority     integer not null default 0,
      max_attempts integer not null default 5,
      backoff      jsonb not null,
      paused       boolean not null default false,
      cursor_txid  xid8 not null,
      cursor_id    bigint not null,
      -- Jobs made so far, and when the last one was.
      jobs         bigint not null default 0,
      followed_at  timestamptz,
      -- Events retention dropped before they became jobs (counted by the janitor in the transaction
      -- that drops them), and the last such loss: {"at", "events", "partition"}.
      lost_events  bigint not null default 0,
      last_loss    jsonb,
      created_at   timestamptz not null default clock_timestamp()
    )`.execute(db);

  await sql`
    create table commitfeed.schedules (
      name         text primary key,
      cron         text not null,
      timezone     text not null default 'UTC',
      queue        text not null,
      payload      json not null,
      priority     integer not null default 0,
      max_attempts integer not null default 5,
      backoff      jsonb not null,
      -- Ticks missed while nothing ran: 'none' skips them, 'last' enqueues the newest, 'all' every
      -- one (the newest catch_up_max of them).
      catch_up     text not null default 'last' check (catch_up in ('none', 'last', 'all')),
      catch_up_max integer not null default 100,
      paused       boolean not null default false,
      -- The newest tick handled (enqueued or skipped); ticks after it are due. Null: none yet.
      last_tick    timestamptz,
      -- Jobs enqueued so far.
      ticks        bigint not null default 0,
      created_at   timestamptz not null default clock_timestamp()
    )`.execute(db);
  // The exactly-once guarantee of a tick: whatever replicas race, a (schedule, tick) pair is
  // inserted once, in the transaction that enqueues its job.
  await sql`
    create table commitfeed.schedule_ticks (
      schedule   text not null references commitfeed.schedules (name) on delete cascade,
      tick_at    timestamptz not null,
      job_id     bigint,
      created_at timestamptz not null default clock_timestamp(),
      primary key (schedule, tick_at)
    )`.execute(db);
  await sql`create index schedule_ticks_created_idx on commitfeed.schedule_ticks (created_at)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table commitfeed.schedule_ticks, commitfeed.schedules, commitfeed.subscriptions`.execute(db);
}
