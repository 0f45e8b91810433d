/**
 * startServer: database (embedded or DATABASE_URL) → migrations → feed and queues → HTTP. The
 * long-lived services (Feed, Queues, the horizon watcher) are built and started here and handed to
 * the app as dependencies, so every route and /metrics sees the same instances.
 *
 * close() shuts down in order: stop the horizon watcher; stop accepting (new requests get 503);
 * release waiting claims and write queued enqueues and acks; stop the subscription follower and the
 * scheduler; end SSE streams with a `retry:` hint and
 * finish in-flight publishes; stop the tailer, listener and janitor; close the HTTP server; close the
 * pool; stop the embedded database.
 */
import net from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { Kysely } from 'kysely';
import pino from 'pino';
import { buildApp } from './app.ts';
import { resolveAuthMode } from './auth/mode.ts';
import type { Config } from './config/config.ts';
import { type Database, createDatabase } from './db/database.ts';
import { configuredDatabase } from './db/embedded.ts';
import { migrate } from './db/migrate.ts';
import { Feed } from './feed/feed.ts';
import { watchHorizon } from './ops/horizon-watch.ts';
import { Sampler } from './ops/sampler.ts';
import { Queues } from './queues/queues.ts';
import { Follower } from './flows/follower.ts';
import { Scheduler } from './flows/scheduler.ts';
import { errorBody } from './http/errors.ts';
import { RETRY_AFTER_S } from './errors.ts';
import { endSseStreams } from './http/sse.ts';

/** Longest wait at shutdown for requests in flight to be answered before connections are dropped. */
const DRAIN_MAX_MS = 10_000;

export interface Server {
  app: FastifyInstance;
  db: Kysely<Database>;
  feed: Feed;
  queues: Queues;
  follower: Follower;
  scheduler: Scheduler;
  sampler: Sampler;
  url: string;
  databaseUrl: string;
  close(): Promise<void>;
}

/** `migrate: false`: the schema is known to be current (a cluster worker; its primary migrated). */
export async function startServer(config: Config, opts: { migrate?: boolean } = {}): Promise<Server> {
  // An unsafe access-control setting fails before anything starts (see src/auth/mode.ts).
  resolveAuthMode(config);
  const log = pino({ level: config.logLevel === 'silent' ? 'silent' : config.logLevel });
  const { url: databaseUrl, embedded } = await configuredDatabase(config, log);
  const { db, pool, sessions } = createDatabase({
    url: databaseUrl,
    poolSize: config.poolSize,
    statementTimeoutMs: config.statementTimeoutMs,
    preparedStatements: config.preparedStatements,
    log,
  });
  // Feed reads on streaming standbys (src/feed/reads.ts): a pool per standby, closed with the primary's.
  const standbys = config.readDatabaseUrls.map((url, i, all) => ({
    // Two URLs of one server (e.g. different options) still get two names.
    name:
      all.findIndex((u) => standbyName(u) === standbyName(url)) === i
        ? standbyName(url)
        : `${standbyName(url)}#${i + 1}`,
    db: createDatabase({
      url,
      poolSize: config.poolSize,
      statementTimeoutMs: config.statementTimeoutMs,
      preparedStatements: config.preparedStatements,
      applicationName: 'commitfeed-read',
      genericPlans: true,
      log,
    }).db,
  }));
  // The tailer's reads on the primary, one at a time, on their own connection planned generically
  // (see genericPlans in src/db/database.ts). Named like the main pool's: it is the same service.
  const tailDb = createDatabase({
    url: databaseUrl,
    poolSize: 1,
    statementTimeoutMs: config.statementTimeoutMs,
    preparedStatements: config.preparedStatements,
    genericPlans: true,
    log,
  }).db;
  const closeReadPools = () =>
    Promise.all([tailDb, ...standbys.map((s) => s.db)].map((d) => d.destroy().catch(() => {})));
  let feed: Feed | undefined;
  let app: FastifyInstance | undefined;
  let stopHorizonWatch: (() => void) | undefined;
  let sampler: Sampler | undefined;
  let follower: Follower | undefined;
  let scheduler: Scheduler | undefined;
  try {
    if (opts.migrate !== false) {
      const applied = await migrate(db);
      if (applied.length > 0) log.info({ applied }, 'migrations applied');
    }
    feed = new Feed({ ...config, db, tailDb, databaseUrl, ownSessions: sessions, standbys, log });
    await feed.start();
    // A stalled horizon is logged with the backend holding it, not only exposed in /metrics.
    stopHorizonWatch = watchHorizon({ db, feed, log });
    const queues = new Queues({ db, feed, batchMaxJobs: config.batchMaxEvents });
    // Streams and cron schedules feeding queues: every replica may run them (FLOWS).
    const f0 = feed;
    follower = new Follower({
      db,
      feed,
      pageSize: config.pageSize,
      pollIntervalMs: config.pollIntervalMs,
      log,
    });
    scheduler = new Scheduler({
      db,
      lateAfterMs: config.scheduleLateAfterMs,
      onEnqueued: () => f0.tailer.wake(),
      log,
    });
    if (config.flows) {
      follower.start();
      scheduler.start();
    }
    // One sampler per process feeds every open live page (src/ops/sampler.ts).
    sampler = new Sampler({ db, feed, queues });
    await sampler.start();
    app = await buildApp({ config, db, feed, queues, follower, scheduler, pool, sampler });
    const f = feed;
    // Every request that reached the server before shutdown began gets its answer; later ones get
    // 503 with Retry-After (and `connection: close`, so a client does not reuse a socket about to go).
    let shuttingDown = false;
    let inFlight = 0;
    let idle: (() => void) | undefined;
    app.addHook('onRequest', async (request, reply) => {
      if (shuttingDown) {
        // An EventSource takes any answer but 200 as final and never reconnects, where a dropped
        // connection it retries (after `retry:`, with Last-Event-ID): a stream request that reached a
        // kept-alive socket of a server on its way down (the browser reconnecting after the retry
        // hint below) is dropped, not refused.
        if (request.headers.accept?.includes('text/event-stream')) {
          reply.hijack();
          request.raw.socket.destroy();
          return;
        }
        reply.header('retry-after', String(RETRY_AFTER_S)).header('connection', 'close');
        return reply
          .code(503)
          .send(
            errorBody(
              503,
              'shutting_down',
              'this server is shutting down; retry (another replica, or here after restart)',
            ),
          );
      }
      inFlight++;
      reply.raw.once('close', () => {
        if (--inFlight === 0) idle?.();
      });
    });
    app.addHook('onSend', async (_request, reply) => {
      if (shuttingDown) reply.header('connection', 'close');
    });
    // preClose runs before the connections are dropped: long-poll claims and SSE streams never end on
    // their own, so end them first (claims answer, SSE gets a retry hint); then wait for the requests
    // in flight to be answered, and only then close the batcher (a publish that reaches it after it
    // closed could only fail). Queues first: their enqueue wake-ups still reach a running feed.
    app.addHook('preClose', async () => {
      shuttingDown = true;
      // No new connections from here (refused, which a client can tell). Only the listening socket
      // closes: http's own close() would also drop idle keep-alive sockets now, resetting a request
      // a client is sending on one at this moment; they get a 503 with `connection: close` instead,
      // and Fastify drops what is left once preClose is done. (Its own close of the server later
      // finds it closed already.)
      net.Server.prototype.close.call(app!.server);
      // Waiting claims answer now; the queue batchers close only after the drain below, so an enqueue
      // or ack still in flight is written and answered rather than refused.
      queues.releaseWaiters();
      endSseStreams(app!, config.sseRetryMs);
      f.endSubscribers(config.sseRetryMs);
      // A follower step or a firing in progress finishes (or rolls back) before the pool closes.
      await Promise.all([follower?.stop(), scheduler?.stop()]);
      if (inFlight > 0) {
        const waited = new Promise<void>((resolve) => {
          idle = resolve;
          setTimeout(resolve, DRAIN_MAX_MS).unref();
        });
        await waited;
        if (inFlight > 0) log.warn({ inFlight }, 'shutdown: requests still in flight after the drain wait');
      }
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
      follower,
      scheduler,
      sampler,
      url,
      databaseUrl,
      close: () =>
        (closing ??= (async () => {
          shuttingDown = true;
          stopHorizonWatch?.();
          sampler?.stop();
          await app!.close();
          await db.destroy();
          await closeReadPools();
          await embedded?.stop();
        })()),
    };
  } catch (err) {
    await Promise.all([follower?.stop(), scheduler?.stop()]).catch(() => {});
    stopHorizonWatch?.();
    sampler?.stop();
    await app?.close().catch(() => {});
    await feed?.stop(config.sseRetryMs).catch(() => {});
    await db.destroy().catch(() => {});
    await closeReadPools();
    await embedded?.stop().catch(() => {});
    throw err;
  }
}

/** host:port/database of a connection URL: names a standby in logs and metrics without its password. */
function standbyName(url: string): string {
  try {
    const u = new URL(url);
    return `${u.host}${u.pathname}`;
  } catch {
    return 'standby';
  }
}
