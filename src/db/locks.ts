/**
 * The advisory locks that keep migrations and maintenance apart, across every instance on one
 * database, and the one order they are taken in.
 *
 * - MIGRATIONS_LOCK, a session lock held by migrate() for its whole run (start-up, `npm run maint`):
 *   one instance migrates, the others wait for it. Kysely's Migrator takes its own lock inside it.
 * - JANITOR_LOCK, a session lock the janitor tries (never waits for) at each pass: one instance
 *   does maintenance, the others skip the pass.
 * - A change to the feed's partitions (create, drop: src/retention/partitions.ts) takes
 *   MIGRATIONS_LOCK too, for its own short transaction (lockSchemaChanges): a migration never sees
 *   the partitions change under it, and a partition is never made or dropped half-way through one.
 *
 * Order: JANITOR_LOCK → MIGRATIONS_LOCK → table locks (the feed, then a partition) → Kysely's
 * migration lock. Nothing takes two of them the other way round — migrate() never takes
 * JANITOR_LOCK, and a partition's transaction takes MIGRATIONS_LOCK as its first statement, before
 * any table lock — so they cannot deadlock. Waits are bounded: a start-up waits for at most one
 * partition's transaction (milliseconds, never a whole maintenance pass, which releases the lock
 * between partitions); a partition change waits at most MIGRATION_WAIT_MS for migration runs (one
 * run takes about a second, several under load, and replicas starting together queue), then fails
 * its step, and the next pass tries again (partitions are made several intervals ahead). That wait
 * is not JANITOR_LOCK_TIMEOUT, the bound for the table locks taken after it: waiting here holds no
 * table lock and no transaction id, so publishes and the feed's horizon never wait behind it.
 */
import { sql } from 'kysely';
import type { Db } from './database.ts';

export const MIGRATIONS_LOCK = 'commitfeed.migrations';
export const JANITOR_LOCK = 'commitfeed.janitor';

/** How long a partition change waits for migration runs to end before its step fails. */
export const MIGRATION_WAIT_MS = 60_000;

/**
 * Takes MIGRATIONS_LOCK until the end of `trx`, waiting at most MIGRATION_WAIT_MS; call it first
 * in the transaction, and set the lock_timeout for the table locks after it.
 *
 * @example
 *   await db.transaction().execute(async (trx) => {
 *     await lockSchemaChanges(trx);
 *     await sql`select set_config('lock_timeout', '1000ms', true)`.execute(trx);
 *     await sql`drop table commitfeed.feed_p20260102_000000`.execute(trx);
 *   });
 */
export async function lockSchemaChanges(trx: Db): Promise<void> {
  try {
    await sql`select set_config('lock_timeout', ${`${MIGRATION_WAIT_MS}ms`}, true)`.execute(trx);
    await sql`select pg_advisory_xact_lock(hashtext(${MIGRATIONS_LOCK}))`.execute(trx);
  } catch (err) {
    if ((err as { code?: string }).code !== '55P03') throw err;
    throw new Error(
      `migrations ran for over ${MIGRATION_WAIT_MS / 1000} s (instances starting): partitions change at the next pass`,
    );
  }
}
