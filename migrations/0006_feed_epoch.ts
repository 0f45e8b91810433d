// The feed's identity: a random epoch created with the schema. Cursors carry a tag derived from it
// (src/feed/cursor.ts), so a cursor minted by another feed (another database or server, or this
// schema dropped and recreated) is recognised instead of being read as a position in this one. A
// restore from a backup keeps the epoch: its cursors are checked by position (src/feed/history.ts).
// Frozen once released; never import application code here.
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table commitfeed.feed_epoch (
      -- One row: the primary key allows only true.
      one        boolean primary key default true check (one),
      epoch      uuid not null default gen_random_uuid(),
      created_at timestamptz not null default clock_timestamp()
    )`.execute(db);
  await sql`insert into commitfeed.feed_epoch default values`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table commitfeed.feed_epoch`.execute(db);
}
