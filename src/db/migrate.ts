/**
 * Brings a database to the current schema at start-up: the numbered migrations in `migrations/`
 * (tables and indexes) with Kysely's Migrator, then every SQL function from `src/sql/` (one file per
 * function, each `create or replace`). A function is not a migration: its one file is its source, so
 * a change to it is a diff of that file, applied by the next start-up. A change of a function's
 * arguments or result type needs a migration that drops the old one first (`create or replace`
 * cannot change them).
 *
 * Several instances may start at once: the whole run happens on one connection holding a session
 * advisory lock, so exactly one instance migrates and the others wait, then find nothing to do (the
 * functions are applied again, which changes nothing). The janitor's partition changes take the same
 * lock (src/db/locks.ts: the locks and their order), and the Migrator looks in the catalog only by
 * reads that a table dropped meanwhile cannot fail (ownSchemaTables).
 */
import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import path from 'node:path';
import {
  CompiledQuery,
  type DatabaseIntrospector,
  type Kysely,
  type Migration,
  type MigrationProvider,
  Migrator,
  sql,
  type TableMetadata,
} from 'kysely';
import { SCHEMA } from './database.ts';
import { MIGRATIONS_LOCK } from './locks.ts';

const MIGRATIONS_DIR = fileURLToPath(new URL('../../migrations/', import.meta.url));
/** src/sql beside this file; in a build, dist/src/sql (`npm run build` copies it: tsc copies no .sql). */
const SQL_DIR = fileURLToPath(new URL('../sql/', import.meta.url));
/** Applied in this order: each function only calls those before it. */
export const SQL_FUNCTIONS = [
  'notify-feed',
  'invalid-name',
  'refuse-invalid',
  'append-plain',
  'tail-clear',
  'append-unchecked',
  'cursor-suffix',
  'append',
  'publish',
  'enqueue-jobs-unchecked',
  'enqueue-jobs',
  'enqueue',
  'follow-subscription',
  'mercure-reserved',
  'mercure-invalid',
  'mercure-append',
  'mercure-publish',
  'floor-mark',
] as const;

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

/** The text of src/sql/<name>.sql. */
export async function functionSource(name: string): Promise<string> {
  try {
    return await readFile(path.join(SQL_DIR, `${name}.sql`), 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    throw new Error(`SQL function source ${name}.sql not found in ${SQL_DIR} (a build copies src/sql there)`);
  }
}

/**
 * A database migrated by a development version from before the baseline migration lists migrations
 * this version does not have: say what to do, rather than Kysely's "corrupted migrations".
 */
// biome-ignore lint/suspicious/noExplicitAny: migrations run on any schema
async function refuseUnknownMigrations(db: Kysely<any>, known: Record<string, Migration>): Promise<void> {
  const { rows: found } = await sql<{ present: boolean }>`
    select to_regclass(${`${SCHEMA}.kysely_migration`}) is not null as present`.execute(db);
  if (!found[0].present) return;
  const { rows } = await sql<{
    name: string;
  }>`select name from ${sql.id(SCHEMA, 'kysely_migration')}`.execute(db);
  const unknown = rows.map((r) => r.name).filter((name) => !(name in known));
  if (unknown.length > 0) {
    throw new Error(
      `this database's ${SCHEMA} schema was made by migrations this version does not have (${unknown.join(', ')}): ` +
        `it predates the first release's baseline schema. Recreate the database (or drop schema ${SCHEMA} cascade) and start again.`,
    );
  }
}

/**
 * The Migrator's catalog look-up (does its table exist?), answered from our schema alone. Kysely's
 * own introspector reads every column of every table in the database and resolves each table's
 * name again (pg_get_serial_sequence), so a table dropped while that statement runs fails it with
 * `relation "…" does not exist`: another instance's janitor dropping a partition — which made
 * start-ups and `npm run maint` fail — or the application dropping one of its own tables. A plain
 * read of pg_class sees a consistent snapshot and resolves no name.
 */
// biome-ignore lint/suspicious/noExplicitAny: migrations run on any schema
function ownSchemaTables(db: Kysely<any>): DatabaseIntrospector {
  const getTables = async (): Promise<TableMetadata[]> => {
    const { rows } = await sql<{ name: string; is_view: boolean }>`
      select c.relname as name, c.relkind = 'v' as is_view
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = ${SCHEMA} and c.relkind in ('r', 'p', 'v')`.execute(db);
    return rows.map((r) => ({ name: r.name, schema: SCHEMA, isView: r.is_view, columns: [] }));
  };
  return {
    getSchemas: async () =>
      (await sql<{ name: string }>`select nspname as name from pg_namespace`.execute(db)).rows,
    getTables,
    getMetadata: async () => ({ tables: await getTables() }),
  };
}

/** Applies the migrations, then the SQL functions; returns the names of the migrations it ran. */
// biome-ignore lint/suspicious/noExplicitAny: migrations run on any schema
export async function migrate(db: Kysely<any>): Promise<string[]> {
  return db.connection().execute(async (conn) => {
    await sql`select pg_advisory_lock(hashtext(${MIGRATIONS_LOCK}))`.execute(conn);
    try {
      await sql`create schema if not exists ${sql.id(SCHEMA)}`.execute(conn);
      const provider = new FolderProvider();
      await refuseUnknownMigrations(conn, await provider.getMigrations());
      // `conn` is this call's own handle on the connection: the Migrator reads `db.introspection`.
      Object.defineProperty(conn, 'introspection', { value: ownSchemaTables(conn) });
      const migrator = new Migrator({ db: conn, provider, migrationTableSchema: SCHEMA });
      const { error, results } = await migrator.migrateToLatest();
      if (error) {
        const failed = results?.find((r) => r.status === 'Error')?.migrationName;
        throw new Error(
          `migration ${failed ?? '(unknown)'} failed: ${String((error as Error).message ?? error)}`,
        );
      }
      for (const name of SQL_FUNCTIONS) {
        // One simple-protocol query (no parameters): the file may hold several statements (the
        // function and its comment), applied as one implicit transaction.
        const text = await functionSource(name);
        try {
          await conn.executeQuery(CompiledQuery.raw(text));
        } catch (err) {
          throw new Error(`applying src/sql/${name}.sql failed: ${(err as Error).message}`);
        }
      }
      return (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
    } finally {
      await sql`select pg_advisory_unlock(hashtext(${MIGRATIONS_LOCK}))`.execute(conn);
    }
  });
}
