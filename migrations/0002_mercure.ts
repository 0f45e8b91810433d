// Storage for the Mercure hub (src/mercure): updates are feed rows of the internal stream
// `mercure/updates` (the `/` makes it unreachable by native names), so they share the feed's order,
// horizon, tailer, window and retention. Frozen once released (see 0001_baseline.ts).
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // The Mercure id of an update (custom or generated), for resuming from Last-Event-ID. NULL on every
  // native row. Adding a nullable column without a default rewrites nothing.
  await sql`alter table commitfeed.feed add column mid text`.execute(db);
  // Resume lookups only: the earliest row bearing an id. Partial, so native rows cost nothing. (On a
  // large existing feed, create it CONCURRENTLY per partition first and attach; see docs/mercure.md.)
  await sql`create index feed_mid_idx on commitfeed.feed (mid, txid, id) where mid is not null`.execute(db);

  // One row per (update, distinct topic): exact-topic catch-up reads this index in feed order, at the
  // speed of a native per-stream catch-up, instead of scanning every update. created_at copies the
  // feed row's, so the join to the feed prunes to one partition. Rows are deleted by the janitor only
  // after the trim mark has passed them (the feed rows are gone by then and the reader sees the mark).
  await sql`
    create table commitfeed.mercure_topics (
      topic      text not null,
      txid       xid8 not null,
      id         bigint not null,
      created_at timestamptz not null
    )`.execute(db);
  await sql`create index mercure_topics_topic_idx on commitfeed.mercure_topics (topic, txid, id)`.execute(db);
  await sql`create index mercure_topics_txid_idx on commitfeed.mercure_topics (txid, id)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table commitfeed.mercure_topics`.execute(db);
  await sql`drop index commitfeed.feed_mid_idx`.execute(db);
  await sql`alter table commitfeed.feed drop column mid`.execute(db);
}
