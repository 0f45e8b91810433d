/**
 * `npm test`: runs the tap suite against DATABASE_URL when set, else against a fresh embedded
 * PostgreSQL started here (and always stopped here, even when tap fails). Extra arguments go to tap
 * (e.g. `npm test -- test/cursor.test.ts`).
 *
 * Before tap starts, one migrated template database is built for this run (test/template-database.ts);
 * each test file clones its databases from it. After tap ends, the template and any test database of
 * this run that a crashed file left behind are dropped, so a shared server keeps nothing of the run.
 *
 * tap (package.json's `tap`) imports the test files through test/ts-loader.mjs and loads only the
 * plugins the tests use: a test that needs another (t.mock, snapshots, fixtures) removes its `!` entry.
 */
import { spawn } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { startEmbeddedPostgres } from '../src/db/embedded.ts';
import { createMigratedDatabase, dropRunDatabases, newRunId, templateName } from './template-database.ts';

const TEST_PG_PORT = Number(process.env.TEST_PG_PORT ?? 25339);

function tap(args: string[], env: NodeJS.ProcessEnv): Promise<number> {
  return new Promise<number>((resolve) => {
    const child = spawn('npx', ['tap', ...args], { stdio: 'inherit', env });
    const forward = (sig: NodeJS.Signals) => child.kill(sig);
    process.on('SIGINT', forward);
    process.on('SIGTERM', forward);
    child.on('exit', (c, signal) => {
      process.off('SIGINT', forward);
      process.off('SIGTERM', forward);
      resolve(c ?? (signal ? 1 : 0));
    });
  });
}

let stop: (() => Promise<void>) | undefined;
if (!process.env.DATABASE_URL) {
  process.stderr.write(`starting embedded PostgreSQL for tests on port ${TEST_PG_PORT}\n`);
  // Under the system temp folder: a checkout may sit where the `postgres` user cannot reach.
  const dir = path.join(os.tmpdir(), `commitfeed-test-pg-${TEST_PG_PORT}`);
  // Two-phase commit on, for the test of a prepared transaction before the tail (cleared.test.ts).
  const pg = await startEmbeddedPostgres({
    dir,
    port: TEST_PG_PORT,
    fresh: true,
    settings: ['max_prepared_transactions=4'],
  });
  process.env.DATABASE_URL = pg.url;
  stop = pg.stop;
}
const adminUrl = process.env.DATABASE_URL;

const runId = newRunId();
let code = 1;
try {
  const started = performance.now();
  await createMigratedDatabase(adminUrl, templateName(runId));
  process.stderr.write(
    `template database ${templateName(runId)} migrated in ${Math.round(performance.now() - started)} ms\n`,
  );
  const env = { ...process.env, TEST_RUN_ID: runId };
  code = await tap(process.argv.slice(2), env);
} catch (err) {
  process.stderr.write(`test set-up failed: ${err instanceof Error ? err.message : String(err)}\n`);
} finally {
  // On the embedded server everything goes with the cluster; a shared server keeps nothing of the run.
  if (!stop) {
    const left = await dropRunDatabases(adminUrl, runId).catch((err: unknown) => {
      process.stderr.write(`could not drop this run's databases: ${String(err)}\n`);
      return [];
    });
    const stray = left.filter((n) => n !== templateName(runId));
    if (stray.length > 0) process.stderr.write(`dropped databases left by test files: ${stray.join(', ')}\n`);
  }
  await stop?.();
}
process.exit(code);
