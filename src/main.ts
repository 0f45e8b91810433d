/**
 * Entry point: `npm start`. Configuration from the environment (and .env); SIGTERM, SIGINT, SIGHUP and,
 * under npm, npm going away shut down cleanly (src/cluster/stop-requests.ts). With WORKERS > 1 the
 * first process becomes the cluster primary and each worker runs the server below (src/cluster).
 */
import cluster from 'node:cluster';
import { runPrimary } from './cluster/primary.ts';
import { notifyReady, workerIndex } from './cluster/worker.ts';
import { loadConfig, loadDotEnv } from './config/config.ts';
import { startServer } from './server.ts';
import { onStopRequest } from './cluster/stop-requests.ts';

loadDotEnv();
const config = (() => {
  try {
    return loadConfig();
  } catch (err) {
    // A bad setting: its message names the variable and what it accepts; a stack trace adds nothing.
    console.error(`commitfeed: ${(err as Error).message}`);
    process.exit(2);
  }
})();
// Asked to stop before the server is up: nothing to drain yet, so exit (an embedded PostgreSQL already
// started is stopped by its exit hook, src/db/embedded.ts).
onStopRequest((why) => {
  console.error(`commitfeed: stopped during start-up (${JSON.stringify(why)})`);
  process.exit(1);
});
if (config.workers > 1 && cluster.isPrimary) {
  // WORKERS=N: this process supervises N workers that run the code below (src/cluster/primary.ts).
  const code = await runPrimary(config).catch((err: Error) => {
    console.error(`commitfeed failed to start: ${err.message}`);
    return 1;
  });
  process.exit(code);
}
const worker = workerIndex();
// A worker's database is prepared by the primary: migrations run once, not once per worker.
const server = await startServer(config, { migrate: worker === undefined }).catch((err: Error) => {
  console.error(`commitfeed failed to start: ${err.message}`);
  process.exit(1);
});
if (worker === undefined) {
  server.app.log.info(
    { url: server.url, database: config.databaseUrl ? 'DATABASE_URL' : `embedded (${config.dataDir}/pg)` },
    'commitfeed ready',
  );
} else {
  server.app.log.info({ url: server.url, worker, pid: process.pid }, 'worker ready');
  notifyReady(server.url);
}

let stopping = false;
const shutdown = (why: object) => {
  if (stopping) return;
  stopping = true;
  server.app.log.info(why, 'shutting down');
  const force = setTimeout(() => process.exit(1), 15000);
  force.unref();
  server.close().then(
    () => process.exit(0),
    (err: Error) => {
      console.error(`shutdown failed: ${err.message}`);
      process.exit(1);
    },
  );
};
onStopRequest(shutdown);
// A worker whose primary is gone (killed) drains and exits instead of lingering without one.
if (worker !== undefined) process.on('disconnect', () => shutdown({ reason: 'cluster primary gone' }));
