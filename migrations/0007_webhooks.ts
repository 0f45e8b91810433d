// Webhooks: HTTP endpoints that receive every matching committed event. An endpoint owns a stream
// subscription (which gains a pattern over several streams, several types and an ordered group for
// its jobs) feeding an internal queue; the delivery workers claim from that queue. Tables and
// indexes only. Frozen once released; never import application code here.
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // A stream subscription over several streams: `pattern` is a regular expression over stream
  // names (built from names and globs; internal streams, whose names hold '/', never match), the
  // follow step then reads the whole feed after the cursor and keeps what matches. `types` keeps
  // events of any of these types (null: every type); `group_key` puts every job in one ordered group.
  await sql`alter table commitfeed.subscriptions drop constraint subscriptions_match_check`.execute(db);
  await sql`
    alter table commitfeed.subscriptions
      add constraint subscriptions_match_check check (match in ('stream', 'pattern')),
      add column streams   text[],
      add column pattern   text,
      add column types     text[],
      add column group_key text,
      add constraint subscriptions_pattern_check check ((match = 'pattern') = (pattern is not null))`.execute(
    db,
  );

  await sql`
    create table commitfeed.webhook_endpoints (
      name            text primary key,
      url             text not null,
      -- Stream names and globs (for display; the stream subscription holds the pattern).
      streams         text[] not null,
      types           text[],
      description     text,
      -- Extra request headers (an object of strings).
      headers         jsonb not null default '{}',
      -- ordered: one delivery at a time in feed order; concurrent: up to concurrency at once.
      mode            text not null check (mode in ('ordered', 'concurrent')),
      concurrency     integer not null check (concurrency > 0),
      timeout_ms      integer not null,
      -- Most deliveries started per second by one process (null: no limit).
      rate_limit      double precision,
      enabled         boolean not null default true,
      disabled_reason text,
      disabled_at     timestamptz,
      -- whsec_<base64>: the signing key. During a rotation's overlap the previous one signs too.
      secret          text not null,
      previous_secret text,
      previous_until  timestamptz,
      -- Since when every attempt failed (null: the last one succeeded, or none yet).
      failing_since   timestamptz,
      last_success_at timestamptz,
      delivered       bigint not null default 0,
      failed_attempts bigint not null default 0,
      created_at      timestamptz not null default clock_timestamp(),
      updated_at      timestamptz not null default clock_timestamp()
    )`.execute(db);
  // Every delivery attempt: the endpoint's delivery log, trimmed by the janitor after RETENTION.
  await sql`
    create table commitfeed.webhook_attempts (
      id         bigint generated always as identity primary key,
      endpoint   text not null,
      event_id   text not null,
      job_id     bigint,
      attempt    integer not null,
      at         timestamptz not null,
      ok         boolean not null,
      status     integer,
      latency_ms double precision not null,
      error      text,
      response   text
    )`.execute(db);
  await sql`create index webhook_attempts_endpoint_idx on commitfeed.webhook_attempts (endpoint, id)`.execute(
    db,
  );
  await sql`create index webhook_attempts_event_idx on commitfeed.webhook_attempts (endpoint, event_id)`.execute(
    db,
  );
  await sql`create index webhook_attempts_at_idx on commitfeed.webhook_attempts (at)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table commitfeed.webhook_attempts, commitfeed.webhook_endpoints`.execute(db);
  await sql`delete from commitfeed.subscriptions where match = 'pattern'`.execute(db);
  await sql`
    alter table commitfeed.subscriptions
      drop constraint subscriptions_pattern_check, drop constraint subscriptions_match_check,
      drop column streams, drop column pattern, drop column types, drop column group_key,
      add constraint subscriptions_match_check check (match in ('stream'))`.execute(db);
}
