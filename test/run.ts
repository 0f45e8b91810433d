/**
 * `npm test`: runs the tap suite against DATABASE_URL when set, else against a fresh embedded
 * PostgreSQL started here (and always stopped here, even when tap fails). Test files create their own
 * databases on that server. Extra arguments go to tap (e.g. `npm test -- test/cursor.test.ts`).
 */
import { spawn } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { startEmbeddedPostgres } from '../src/db/embedded.ts';

const TEST_PG_PORT = Number(process.env.TEST_PG_PORT ?? 54339);

let stop: (() => Promise<void>) | undefined;
if (!process.env.DATABASE_URL) {
  process.stderr.write(`starting embedded PostgreSQL for tests on port ${TEST_PG_PORT}\n`);
  // Under the system temp folder: a checkout may sit where the `postgres` user cannot reach.
  const dir = path.join(os.tmpdir(), `commitfeed-test-pg-${TEST_PG_PORT}`);
  const pg = await startEmbeddedPostgres({ dir, port: TEST_PG_PORT, fresh: true });
  process.env.DATABASE_URL = pg.url;
  stop = pg.stop;
}

const code = await new Promise<number>((resolve) => {
  const tap = spawn('npx', ['tap', ...process.argv.slice(2)], { stdio: 'inherit', env: process.env });
  const forward = (sig: NodeJS.Signals) => tap.kill(sig);
  process.on('SIGINT', forward);
  process.on('SIGTERM', forward);
  tap.on('exit', (c, signal) => resolve(c ?? (signal ? 1 : 0)));
});
await stop?.();
process.exit(code);
