/**
 * The migrated template database that every test database is cloned from.
 *
 * Lifecycle: `npm test` (test/run.ts) builds one template per run before tap starts, by calling the
 * service's own `migrate()` on an empty database, and drops it (with any test database of the run
 * a crashed file left behind) after tap ends. Test files then get `create database X template T`:
 * a copy of a few dozen catalog pages instead of running every migration again in every database.
 *
 * Names carry a per-run id, so two runs against one shared server (CI's PostgreSQL 15, or several
 * engineers' runs) never touch each other's template or databases. PostgreSQL refuses to clone a
 * database that has open sessions, so the migration pool is destroyed before any clone is made and
 * nothing connects to the template afterwards.
 */
import { randomBytes } from 'node:crypto';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { migrate } from '../src/db/migrate.ts';

/** A database name (letters, digits, `_`) that is safe to splice into DDL. */
const SAFE_NAME = /^[a-z_][a-z0-9_]*$/;

export function withDatabase(adminUrl: string, name: string): string {
  const u = new URL(adminUrl);
  u.pathname = `/${name}`;
  return u.toString();
}

async function admin<R>(adminUrl: string, fn: (c: pg.Client) => Promise<R>): Promise<R> {
  const c = new pg.Client({ connectionString: adminUrl });
  c.on('error', () => {});
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/** A short random id for one test run: prefixes the template's and the test databases' names. */
export function newRunId(): string {
  return `${process.pid.toString(36)}${randomBytes(3).toString('hex')}`;
}

export const templateName = (runId: string): string => `cf_tpl_${runId}`;

/** Creates `name` and runs every migration in it, then closes all its connections. */
export async function createMigratedDatabase(adminUrl: string, name: string): Promise<string[]> {
  if (!SAFE_NAME.test(name)) throw new Error(`unsafe database name ${JSON.stringify(name)}`);
  await admin(adminUrl, (c) => c.query(`create database ${name}`));
  const pool = new pg.Pool({ connectionString: withDatabase(adminUrl, name), max: 1 });
  pool.on('error', () => {});
  const db = new Kysely<unknown>({ dialect: new PostgresDialect({ pool }) });
  try {
    return await migrate(db);
  } finally {
    await db.destroy();
  }
}

/** Drops the run's template and any test database of the run still present. */
export async function dropRunDatabases(adminUrl: string, runId: string): Promise<string[]> {
  return admin(adminUrl, async (c) => {
    const { rows } = await c.query<{ datname: string }>(
      'select datname from pg_database where datname = $1 or starts_with(datname, $2)',
      [templateName(runId), `cf_test_${runId}_`],
    );
    for (const { datname } of rows) {
      if (SAFE_NAME.test(datname)) await c.query(`drop database if exists ${datname} with (force)`);
    }
    return rows.map((r) => r.datname);
  });
}
