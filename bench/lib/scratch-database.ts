// A database of its own for a one-off bench script: on DATABASE_URL's server, or on a fresh embedded
// PostgreSQL started here when it is unset; `drop()` removes the database (and stops that server),
// so a run leaves nothing behind even when it fails (call it in a finally).
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { startEmbeddedPostgres } from '../../src/db/embedded.ts';

export interface ScratchDatabase {
  /** The database's own URL. */
  url: string;
  /** A connection to the server's admin database (for CPU readings of the backends and the like). */
  admin: pg.Client;
  /** The database's name. */
  name: string;
  drop(): Promise<void>;
}

/** Creates `cf_bench_<label>_<pid>`; the embedded server (no DATABASE_URL) listens on BENCH_PG_PORT or `port`. */
export async function scratchDatabase(label: string, port: number): Promise<ScratchDatabase> {
  let adminUrl = process.env.DATABASE_URL;
  let stopPg: (() => Promise<void>) | undefined;
  if (!adminUrl) {
    const p = Number(process.env.BENCH_PG_PORT ?? port);
    const embedded = await startEmbeddedPostgres({
      dir: path.join(os.tmpdir(), `commitfeed-bench-${p}`),
      port: p,
      fresh: true,
    });
    adminUrl = embedded.url;
    stopPg = embedded.stop;
  }
  const name = `cf_bench_${label}_${process.pid}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`create database ${name}`);
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    admin,
    name,
    async drop() {
      await admin.query(`drop database if exists ${name} with (force)`);
      await admin.end();
      await stopPg?.();
    },
  };
}
