// The key the hub encrypts generated Mercure ids with (src/mercure/ids.ts): an HTTP publish without
// an id stores none, its id being its row's position encrypted under this key. One per database, made
// here once and never changed (every generated id already given out depends on it; it is replicated
// to standbys like any row). 244 random bits from two version-4 UUIDs (gen_random_uuid is built in;
// pgcrypto is not required).
// Frozen once released; never import application code here.
//
// Going down drops the key: updates published since with generated ids keep their rows, but an older
// version frames them without an id (it reads the id from the row). Do not go below this after use.
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table commitfeed.mercure_id_key (
      one boolean primary key default true check (one),
      key bytea not null check (length(key) >= 16)
    )`.execute(db);
  await sql`
    insert into commitfeed.mercure_id_key (key)
    values (decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'))`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table commitfeed.mercure_id_key`.execute(db);
}
