/** The feed's epoch (commitfeed.feed_epoch): a random UUID created with the schema (see history.ts). */
import { sql } from 'kysely';
import type { Db } from '../../db/database.ts';

export async function readFeedEpoch(db: Db): Promise<string> {
  const { rows } = await sql<{
    epoch: string;
  }>`select epoch::text as epoch from commitfeed.feed_epoch`.execute(db);
  if (rows[0] === undefined) throw new Error('commitfeed.feed_epoch is empty: the schema was not migrated');
  return rows[0].epoch;
}
