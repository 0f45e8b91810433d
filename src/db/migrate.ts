/**
 * Runs the numbered migrations in `migrations/` with Kysely's Migrator at start-up.
 *
 * Several instances may start at once: the whole run happens on one connection holding a session
 * advisory lock, so exactly one instance migrates and the others wait, then find nothing to do.
 */
import { readdir } from 'node:fs/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import path from 'node:path';
import { type Kysely, type Migration, type MigrationProvider, Migrator, sql } from 'kysely';
import { SCHEMA } from './database.ts';

const MIGRATIONS_DIR = fileURLToPath(new URL('../../migrations/', import.meta.url));
const LOCK_KEY = 'commitfeed.migrations';

class FolderProvider implements MigrationProvider {
  async getMigrations(): Promise<Record<string, Migration>> {
    const out: Record<string, Migration> = {};
    for (const file of (await readdir(MIGRATIONS_DIR)).sort()) {
      if (!/^\d+.*\.(ts|js)$/.test(file) || file.endsWith('.d.ts')) continue;
      const mod = (await import(pathToFileURL(path.join(MIGRATIONS_DIR, file)).href)) as Migration;
      out[file.replace(/\.(ts|js)$/, '')] = mod;
    }
    return out;
  }
}

// biome-ignore lint/suspicious/noExplicitAny: migrations run on any schema
export async function migrate(db: Kysely<any>): Promise<string[]> {
  return db.connection().execute(async (conn) => {
    await sql`select pg_advisory_lock(hashtext(${LOCK_KEY}))`.execute(conn);
    try {
      await sql`create schema if not exists ${sql.id(SCHEMA)}`.execute(conn);
      const migrator = new Migrator({
        db: conn,
        provider: new FolderProvider(),
        migrationTableSchema: SCHEMA,
      });
      const { error, results } = await migrator.migrateToLatest();
      if (error) {
        const failed = results?.find((r) => r.status === 'Error')?.migrationName;
        throw new Error(
          `migration ${failed ?? '(unknown)'} failed: ${String((error as Error).message ?? error)}`,
        );
      }
      return (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
    } finally {
      await sql`select pg_advisory_unlock(hashtext(${LOCK_KEY}))`.execute(conn);
    }
  });
}
