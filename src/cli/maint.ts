/**
 * Operator command: `npm run maint -- run` does one maintenance pass now (partitions ahead, drops past
 * RETENTION, key, job, schedule-tick and Mercure topic trimming; skipped if another instance is doing one), `npm run maint --
 * stats` prints feed statistics as JSON. Uses DATABASE_URL — DIRECT_DATABASE_URL when set: its
 * migrations and the janitor hold session advisory locks, which a transaction-mode pool would take and
 * release on different server connections — and the same settings as the server (environment or
 * .env); migrations are applied first, as at start-up. Without DATABASE_URL: the embedded PostgreSQL
 * that a running `npm start` uses (DATA_DIR/pg, found from its postmaster.pid).
 */
import pino from 'pino';
import { loadConfig, loadDotEnv } from '../config/config.ts';
import { createDatabase } from '../db/database.ts';
import { embeddedDir } from '../db/embedded.ts';
import { runningEmbeddedUrl } from '../db/embedded-running.ts';
import { migrate } from '../db/migrate.ts';
import { explainStartupRefusal } from '../db/pooler-checks.ts';
import { feedStats } from '../retention/partitions.ts';
import { buildJanitor } from '../server.ts';

loadDotEnv();
const config = loadConfig();
const command = process.argv[2];
if (command !== 'run' && command !== 'stats') {
  console.error('usage: npm run maint -- run | stats   (needs DATABASE_URL)');
  process.exit(2);
}
// Without DATABASE_URL: the embedded database of DATA_DIR that a running `npm start` started. maint
// starts none itself: while it held the folder, `npm start` would be refused (src/db/embedded-running.ts).
const url =
  config.directDatabaseUrl ?? config.databaseUrl ?? (await runningEmbeddedUrl(embeddedDir(config.dataDir)));
if (!url) {
  console.error(
    `DATABASE_URL is not set and no embedded PostgreSQL is running in ${embeddedDir(config.dataDir)}: ` +
      'start the service (npm start) with the same DATA_DIR and run this again, or set DATABASE_URL',
  );
  process.exit(2);
}
const log = pino({ level: config.logLevel === 'silent' ? 'silent' : 'warn' });
const { db } = createDatabase({
  url,
  poolSize: 2,
  statementTimeoutMs: config.statementTimeoutMs,
  preparedStatements: config.preparedStatements ?? true,
  log,
  applicationName: 'commitfeed-maint',
});
try {
  await migrate(db).catch((err: unknown) => {
    throw explainStartupRefusal(err, config.directDatabaseUrl ? 'DIRECT_DATABASE_URL' : 'DATABASE_URL');
  });
  if (command === 'run') {
    const run = await buildJanitor(db, { ...config, janitorIntervalMs: 0 }, log).runOnce();
    console.log(JSON.stringify(run, null, 2));
    if (!run.ran) console.error('another instance is doing maintenance right now; nothing done');
    process.exitCode = run.errors.length > 0 ? 1 : 0;
  } else {
    console.log(JSON.stringify(await feedStats(db), null, 2));
  }
} catch (err) {
  console.error(`maintenance failed: ${(err as Error).message}`);
  process.exitCode = 1;
} finally {
  await db.destroy();
}
