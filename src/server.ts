/**
 * startServer: database (embedded or DATABASE_URL) → migrations → feed and queues → HTTP. The
 * long-lived services (Feed, Queues, the horizon watcher) are built and started here and handed to
 * the app as dependencies, so every route and /metrics sees the same instances.
 *
 * close() shuts down in order: stop the horizon watcher; stop accepting (new requests get 503);
 * release waiting claims and write queued enqueues and acks; end SSE streams with a `retry:` hint and
 * finish in-flight publishes; stop the tailer, listener and janitor; close the HTTP server; close the
 * pool; stop the embedded database.
 */
import type { FastifyInstance } from 'fastify';
import type { Kysely } from 'kysely';
import pino from 'pino';
import { buildApp } from './app.ts';
import { resolveAuthMode } from './auth/mode.ts';
import type { Config } from './config.ts';
import { type Database, createDatabase } from './db/database.ts';
import { type EmbeddedDatabase, startEmbeddedPostgres } from './db/embedded.ts';
import { migrate } from './db/migrate.ts';
import { Feed } from './feed/feed.ts';
import { watchHorizon } from './ops/horizon-watch.ts';
import { Sampler } from './ops/sampler.ts';
import { Queues } from './queues/queues.ts';

export interface Server {
  app: FastifyInstance;
  db: Kysely<Database>;
  feed: Feed;
  queues: Queues;
  sampler: Sampler;
  url: string;
  databaseUrl: string;
  close(): Promise<void>;
}

export async function startServer(config: Config): Promise<Server> {
  // An unsafe access-control setting fails before anything starts (see src/auth/mode.ts).
  resolveAuthMode(config);
  const log = pino({ level: config.logLevel === 'silent' ? 'silent' : config.logLevel });
  let embedded: EmbeddedDatabase | undefined;
  let databaseUrl = config.databaseUrl;
  if (!databaseUrl) {
    log.info({ dir: config.dataDir, port: config.embeddedPgPort }, 'starting embedded PostgreSQL');
    embedded = await startEmbeddedPostgres({
      dir: `${config.dataDir}/pg`,
      port: config.embeddedPgPort,
      log: (line) => log.debug({ pg: line }),
    });
    databaseUrl = embedded.url;
  }
  const { db, pool, sessions } = createDatabase({
    url: databaseUrl,
    poolSize: config.poolSize,
    statementTimeoutMs: config.statementTimeoutMs,
    preparedStatements: config.preparedStatements,
    log,
  });
  let feed: Feed | undefined;
  let app: FastifyInstance | undefined;
  let stopHorizonWatch: (() => void) | undefined;
  let sampler: Sampler | undefined;
  try {
    const applied = await migrate(db);
    if (applied.length > 0) log.info({ applied }, 'migrations applied');
    feed = new Feed({ ...config, db, databaseUrl, ownSessions: sessions, log });
    await feed.start();
    // A stalled horizon is logged with the backend holding it, not only exposed in /metrics.
    stopHorizonWatch = watchHorizon({ db, feed, log });
    const queues = new Queues({ db, feed, batchMaxJobs: config.batchMaxEvents });
    // One sampler per process feeds every open live page (src/ops/sampler.ts).
    sampler = new Sampler({ db, feed, queues });
    await sampler.start();
    app = await buildApp({ config, db, feed, queues, pool, sampler });
    const f = feed;
    // preClose runs before the server stops accepting: long-poll claims and SSE streams never end on
    // their own, so end them first (claims answer, SSE gets a retry hint) or close() would wait for
    // them forever. Queues first: their enqueue wake-ups still reach a running feed.
    app.addHook('preClose', async () => {
      await queues.close();
      await f.stop(config.sseRetryMs);
    });
    const url = await app.listen({ port: config.port, host: config.host });
    let closing: Promise<void> | undefined;
    return {
      app,
      db,
      feed,
      queues,
      sampler,
      url,
      databaseUrl,
      close: () =>
        (closing ??= (async () => {
          stopHorizonWatch?.();
          sampler?.stop();
          await app!.close();
          await db.destroy();
          await embedded?.stop();
        })()),
    };
  } catch (err) {
    stopHorizonWatch?.();
    sampler?.stop();
    await app?.close().catch(() => {});
    await feed?.stop(config.sseRetryMs).catch(() => {});
    await db.destroy().catch(() => {});
    await embedded?.stop().catch(() => {});
    throw err;
  }
}
