/**
 * WORKERS=N: the primary process of a node:cluster. It serves no request itself; it prepares the
 * database once, forks N workers that share the listening port (each a full server with its own
 * batcher, tailer, listener and SSE hub: any worker serves any cursor, since all read one feed), and
 * supervises them.
 *
 * Lifecycle: without DATABASE_URL the primary starts the embedded PostgreSQL (once, not per worker)
 * and hands its URL to the workers; it runs the migrations once, so workers skip them. It logs
 * `commitfeed ready` when every worker listens. SIGTERM, SIGINT or SIGHUP (stop-requests.ts): every
 * worker gets SIGTERM and drains as a single server does (SSE clients get a `retry:` hint, requests in
 * flight are answered); when all have exited the embedded database stops and the primary exits 0, or 1
 * if a worker did not exit cleanly (or had to be killed after the drain deadline).
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
import { onStopRequest } from './stop-requests.ts';
import { MetricsCollections } from './collect.ts';
import { WORKER_ENV, isClusterMessage } from './worker.ts';

const RESTART_LIMIT = 5;
const RESTART_WINDOW_MS = 60_000;
/** A draining worker gets this long before SIGKILL (its own drain gives up after 10 s; 15 s force). */
const STOP_DEADLINE_MS = 20_000;

/** Runs the primary until shutdown; resolves with the process exit code. */
export async function runPrimary(config: Config): Promise<number> {
  const log = pino({ level: config.logLevel === 'silent' ? 'silent' : config.logLevel });
  const { url: databaseUrl, embedded } = await configuredDatabase(config, log);
  try {
    // Migrations hold a session advisory lock: on the server itself when DATABASE_URL is a pool.
    await migrateOnce(config.directDatabaseUrl ?? databaseUrl, log);
  } catch (err) {
    await embedded?.stop().catch(() => {});
    throw err;
  }
  const supervisor = new Supervisor(config, databaseUrl, log, () => embedded?.stop());
  onStopRequest((why) => supervisor.shutdown(why));
  return supervisor.run();
}

/** The migrations, once for every worker (they start with `migrate: false`). */
async function migrateOnce(url: string, log: pino.Logger): Promise<void> {
  const { db } = createDatabase({ url, poolSize: 2, statementTimeoutMs: 0, log });
  try {
    const applied = await migrate(db);
    if (applied.length > 0) log.info({ applied }, 'migrations applied');
  } finally {
    await db.destroy();
  }
}

/** The workers by index: forks them, replaces the dead, and stops them all (see the lifecycle note). */
class Supervisor {
  private readonly byIndex = new Map<number, Worker>();
  private readonly ready = new Set<number>();
  private readonly deaths: number[] = [];
  private readonly metrics = new MetricsCollections();
  private everReady = false;
  private stopping = false;
  private failed = false;
  private done!: (code: number) => void;

  constructor(
    private readonly config: Config,
    private readonly databaseUrl: string,
    private readonly log: pino.Logger,
    private readonly stopDatabase: () => Promise<void> | undefined,
  ) {}

  run(): Promise<number> {
    const finished = new Promise<number>((r) => (this.done = r));
    for (let i = 1; i <= this.config.workers; i++) this.fork(i);
    return finished;
  }

  shutdown(why: object): void {
    if (this.stopping) return;
    this.log.info({ ...why, workers: this.byIndex.size }, 'shutting down');
    this.stop();
  }

  private fork(index: number): void {
    const env = { ...process.env, DATABASE_URL: this.databaseUrl, [WORKER_ENV]: String(index) };
    const w = cluster.fork(env);
    this.byIndex.set(index, w);
    w.on('message', (m: unknown) => this.onMessage(index, w, m));
    w.on('exit', (code, signal) => this.onExit(index, w, code, signal));
  }

  private onExit(index: number, w: Worker, code: number | null, signal: string | null): void {
    if (this.byIndex.get(index) === w) this.byIndex.delete(index);
    this.ready.delete(index);
    if (this.stopping) {
      // The exit code reports the drain: a worker that did not exit cleanly from SIGTERM fails it.
      if (code !== 0 || signal !== null) this.failed = true;
      if (this.byIndex.size === 0) void this.finish();
      return;
    }
    const now = Date.now();
    const deaths = this.deaths;
    deaths.push(now);
    while (deaths.length > 0 && deaths[0] < now - RESTART_WINDOW_MS) deaths.shift();
    if (!this.everReady || deaths.length > RESTART_LIMIT) {
      this.log.error(
        { worker: index, pid: w.process.pid, code, signal, deathsInLastMinute: deaths.length },
        this.everReady
          ? `worker died: more than ${RESTART_LIMIT} deaths in ${RESTART_WINDOW_MS / 1000} s, stopping the server`
          : 'worker died before the server was ready: stopping',
      );
      this.failed = true;
      this.stop();
      return;
    }
    this.log.error({ worker: index, pid: w.process.pid, code, signal }, 'worker died: restarting it');
    this.fork(index);
  }

  private onMessage(index: number, w: Worker, m: unknown): void {
    if (!isClusterMessage(m)) return;
    if (m.cf === 'ready') this.onReady(index, w, m.url);
    else if (m.cf === 'metrics-request') this.metrics.request(w, m.id, [...this.byIndex.values()]);
    else if (m.cf === 'metrics-part') this.metrics.part(m.id, m.metrics);
  }

  private onReady(index: number, w: Worker, url: string): void {
    this.ready.add(index);
    if (!this.everReady && this.ready.size === this.config.workers) {
      this.everReady = true;
      const { workers, databaseUrl, dataDir } = this.config;
      const database = databaseUrl ? 'DATABASE_URL' : `embedded (${dataDir}/pg)`;
      this.log.info({ url, workers, database }, 'commitfeed ready');
    } else if (this.everReady) {
      this.log.info({ worker: index, pid: w.process.pid }, 'worker restarted');
    }
  }

  private async finish(): Promise<void> {
    await this.stopDatabase()?.catch((err: Error) =>
      this.log.error({ err: err.message }, 'embedded PostgreSQL stop failed'),
    );
    this.done(this.failed ? 1 : 0);
  }

  private stop(): void {
    this.stopping = true;
    if (this.byIndex.size === 0) {
      void this.finish();
      return;
    }
    for (const w of this.byIndex.values()) w.process.kill('SIGTERM');
    setTimeout(() => {
      for (const w of this.byIndex.values()) {
        this.log.error({ pid: w.process.pid }, 'worker still running after the drain deadline: killing it');
        w.process.kill('SIGKILL');
      }
    }, STOP_DEADLINE_MS).unref();
  }
}
