// commitfeed.append_plain also writes Mercure updates (their ids and topic index rows), so that the
// hub's publishes share the native publishes' group commit. Functions only: the tables stay as they
// are. Frozen once released; never import application code here.
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // The function gains parameters (mids, topics, topic_of, with defaults): the migrator re-creates it
  // after this, and the old signature must go so that calls resolve to one function.
  await sql`drop function if exists commitfeed.append_plain(text[], text[], json[])`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop function if exists commitfeed.append_plain(text[], text[], json[], text[], text[], integer[])`.execute(
    db,
  );
}
