// Active subscriptions of the Mercure hub (src/mercure/active-subscriptions.ts, draft-08 §Active
// Subscriptions): one row per (connection, matcher) while the connection is open, written in the same
// transaction as its subscription event, and each instance's lease, so a survivor can end the
// subscriptions of an instance that died. Frozen once released (see 0001_baseline.ts).
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // `topic` is the subscription's event topic (hub path + /subscriptions/{type}/{match}/{subscriber}),
  // unique by construction; `doc` the event's JSON with `active: true`.
  await sql`
    create table commitfeed.mercure_subscriptions (
      topic      text primary key,
      subscriber text not null,
      match_type text not null,
      match      text not null,
      doc        jsonb not null,
      instance   uuid not null,
      since      timestamptz not null default now()
    )`.execute(db);
  await sql`create index mercure_subscriptions_matcher_idx on commitfeed.mercure_subscriptions (match_type, match)`.execute(
    db,
  );
  await sql`create index mercure_subscriptions_subscriber_idx on commitfeed.mercure_subscriptions (subscriber)`.execute(
    db,
  );
  await sql`create index mercure_subscriptions_instance_idx on commitfeed.mercure_subscriptions (instance)`.execute(
    db,
  );
  // One row per running instance that serves subscriptions, renewed while it lives.
  await sql`
    create table commitfeed.mercure_instances (
      instance uuid primary key,
      seen     timestamptz not null default now()
    )`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table commitfeed.mercure_instances`.execute(db);
  await sql`drop table commitfeed.mercure_subscriptions`.execute(db);
}
