/**
 * How far the tailer is behind the committed feed, as the live page shows it: the feed's lag read
 * (src/feed/queries/lag.ts, one statement a tick), counting rows up to a cap.
 */
import type { Kysely } from 'kysely';
import type { Database } from '../db/database.ts';
import type { Cursor } from '../feed/cursor.ts';
import { feedLag } from '../feed/queries/lag.ts';

/** Rows past the tailer counted per tick at most: a bounded index walk, not a count of the feed. */
export const BEHIND_CAP = 10_000;

/** Rows past `position` (up to BEHIND_CAP + 1) and the age of the oldest of them. */
export function behind(db: Kysely<Database>, position: Cursor): Promise<{ rows: number; ageS: number }> {
  return feedLag(db, position, BEHIND_CAP + 1);
}
