/** Entry point: `npm start`. Configuration from the environment (and .env); SIGINT/SIGTERM shut down cleanly. */
import { loadConfig, loadDotEnv } from './config.ts';
import { startServer } from './server.ts';

loadDotEnv();
const config = loadConfig();
const server = await startServer(config).catch((err: Error) => {
  console.error(`commitfeed failed to start: ${err.message}`);
  process.exit(1);
});
server.app.log.info(
  { url: server.url, database: config.databaseUrl ? 'DATABASE_URL' : `embedded (${config.dataDir}/pg)` },
  'commitfeed ready',
);

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
