/**
 * Retention of the Mercure topic index (commitfeed.mercure_topics, see migrations/0002_mercure.ts):
 * rows at or below the trim mark are deleted in batches, after the janitor dropped their feed rows
 * and raised the mark. Never before: an exact-topic catch-up that found no index rows for a stretch
 * whose feed rows still exist would skip those updates silently, while one that finds the mark
 * raised knows it missed them.
 */
import { sql } from 'kysely';
import type { Db } from '../db/database.ts';
import type { JanitorTask } from '../retention/janitor.ts';

/** The janitor's Mercure step: it runs after the feed's drops of the same pass, as it must. */
export const mercureTopicRetention: JanitorTask = {
  name: 'mercure',
  run: async (db) => ({ mercureTopics: await trimMercureTopics(db) }),
};

/** Deletes topic rows at or below the trim mark; returns how many. */
export async function trimMercureTopics(db: Db, batch = 5000, maxBatches = 100): Promise<number> {
  let total = 0;
  for (let i = 0; i < maxBatches; i++) {
    const { numAffectedRows } = await sql`
      delete from commitfeed.mercure_topics t
      where t.ctid = any (array(
        select c.ctid from commitfeed.mercure_topics c, commitfeed.trim_mark m
        where (c.txid, c.id) <= (m.txid, m.id)
        limit ${batch}))`.execute(db);
    const n = Number(numAffectedRows ?? 0);
    total += n;
    if (n < batch) break;
  }
  return total;
}
