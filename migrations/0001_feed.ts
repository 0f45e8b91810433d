// The change feed: one append-only table for every stream. Frozen: never edit after release, add a new
// migration instead (and never import application code here).
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table commitfeed.feed (
      id         bigint generated always as identity,
      -- The writer's transaction id: readers only take rows whose txid is below the snapshot's xmin,
      -- i.e. from transactions certainly finished, and order by (txid, id). Ordering by id alone
      -- loses events whose transaction took a lower id but committed later.
      txid       xid8 not null default pg_current_xact_id(),
      stream     text not null,
      type       text,
      key        text,
      -- json, not jsonb: the text is kept as written, so it is served back without re-serialising.
      data       json not null,
      -- clock_timestamp(): a late-committing row must not be born already old.
      created_at timestamptz not null default clock_timestamp(),
      primary key (txid, id)
    )`.execute(db);
  await sql`create index feed_stream_idx on commitfeed.feed (stream, txid, id)`.execute(db);
  await sql`create unique index feed_stream_key_idx on commitfeed.feed (stream, key) where key is not null`.execute(
    db,
  );
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table commitfeed.feed`.execute(db);
}
