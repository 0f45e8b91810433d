// A Mercure update's canonical topic moves into the feed row (the `topic` column and its partial
// index), and its id's index becomes a hash index: an update written by the group commit cost its feed
// row plus a commitfeed.mercure_topics row (heap and two indexes) and a btree entry for a random id,
// about 2.4x the instructions of a native event's row (bench/HISTORY.md, "Mercure publish cost").
// commitfeed.mercure_topics keeps the other topics of an update (and every topic of the updates
// written before this migration, which exact-topic catch-up still reads there).
// Frozen once released; never import application code here.
//
// On a large existing feed, both index builds read every partition (see docs/mercure.md).
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // NULL on every native row: adding a nullable column without a default rewrites nothing. Compared
  // bytewise ("C"): only equality and the order within a topic matter, and the database's collation
  // costs a strcoll per key compared in every insert.
  await sql`alter table commitfeed.feed add column topic text collate "C"`.execute(db);
  await sql`create index feed_topic_idx on commitfeed.feed (topic, txid, id) where topic is not null`.execute(
    db,
  );
  // Resume looks ids up by equality only; a hash index inserts without descending a tree of long,
  // random text keys (measured: ~13,000 fewer instructions per update than the btree).
  await sql`drop index commitfeed.feed_mid_idx`.execute(db);
  await sql`create index feed_mid_idx on commitfeed.feed using hash (mid) where mid is not null`.execute(db);
  // commitfeed.append_plain's topic arguments change (the canonical topic, then the others).
  await sql`drop function if exists commitfeed.append_plain(text[], text[], json[], text[], text[], integer[])`.execute(
    db,
  );
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop function if exists commitfeed.append_plain(text[], text[], json[], text[], text[], text[], integer[])`.execute(
    db,
  );
  await sql`drop index commitfeed.feed_mid_idx`.execute(db);
  await sql`create index feed_mid_idx on commitfeed.feed (mid, txid, id) where mid is not null`.execute(db);
  // The canonical topics go back to the topic index, which is where the older version looks.
  await sql`
    insert into commitfeed.mercure_topics (topic, txid, id, created_at)
    select f.topic, f.txid, f.id, f.created_at from commitfeed.feed f where f.topic is not null`.execute(db);
  await sql`drop index commitfeed.feed_topic_idx`.execute(db);
  await sql`alter table commitfeed.feed drop column topic`.execute(db);
}
