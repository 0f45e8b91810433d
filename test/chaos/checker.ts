/**
 * The chaos checker: an adversarial end-to-end test of the delivery promise ("every committed event,
 * exactly once, in one order, whatever happens"). Run alone:
 *
 *   npx tsx test/chaos/checker.ts --seed 42 --duration 60 [--readers 60] [--streams 5] [--replicas 2] [--standby | --pooler]
 *
 * It starts its own embedded PostgreSQL (own folder under the temp dir, own port: it restarts it and
 * holds transactions open) and runs the service as child processes (src/main.ts under test/ts-loader.mjs)
 * so it can kill -9 and restart them. Every process it starts is stopped, even on failure.
 *
 * - Writers: HTTP single publishes, HTTP batch publishes, and raw SQL transactions through
 *   appendEvents that sleep 0–200 ms before COMMIT or ROLLBACK (commits land out of id order).
 *   Every event carries a unique idempotency key. An HTTP publish whose outcome is unknown (503,
 *   connection error, killed server, 503 `commit_unknown`) is re-published with the same key until it
 *   gets an answer; any other 503 must never have committed (the retry would report `duplicate`),
 *   which is checked. Raw SQL
 *   transactions that lose their connection at COMMIT are unknown and resolved from the table.
 * - Readers (test/chaos/readers.ts): SSE subscribers over a handful of streams (a few read several
 *   streams on one connection), half from `earliest`, half live; each disconnects at random and
 *   resumes with its last id, on any replica; one in ten is a real EventSource that reconnects by
 *   itself. A live reader's expectations start after the id primed at its first connect. Every
 *   (re)connect's HTTP answer is tallied.
 * - Faults: kill -9 + restart of a service process, restart of PostgreSQL, pg_terminate_backend of
 *   the LISTEN connections and of pooled connections, a writing transaction held open for seconds.
 *   While PostgreSQL (or PgBouncer) is down, an outage probe to every replica: an SSE request whose
 *   start only the database can decide, which must be answered 200 and say `reset` once it is back.
 * - Pooler mode (`--pooler`): the services and the SQL writers reach PostgreSQL through a real
 *   PgBouncer in transaction mode (test/pgbouncer.ts), the services with DIRECT_DATABASE_URL on
 *   PostgreSQL itself. One more fault: PgBouncer restarted (every pooled connection cut at once).
 * - Standby mode (`--standby`): PostgreSQL is a primary with a streaming hot standby
 *   (test/standby-cluster.ts) and the services read the feed from the standby (READ_DATABASE_URL).
 *   Two more faults: replay paused for a while (the standby lags; reads fall over to the primary),
 *   and the standby restarted. A PostgreSQL restart restarts the primary.
 * - Verdict: for every reader, the events received = the committed events of its streams in
 *   (txid, id) order, each exactly once, none rolled back; and every SSE request that got an HTTP
 *   answer got 200 (the faults are all transient). One line; the first divergence on failure.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { compareCursors, parseCursor } from '../../src/feed/cursor.ts';
import type { EventInput } from '../../src/feed/event.ts';
import { MARKER_STREAM } from '../../src/feed/marker.ts';
import { appendEvents } from '../../src/feed/queries/append.ts';
import { type EmbeddedDatabase, startEmbeddedPostgres } from '../../src/db/embedded.ts';
import type { Database } from '../../src/db/database.ts';
import { type PgBouncer, startPgBouncer } from '../pgbouncer.ts';
import { type StandbyCluster, startStandbyCluster } from '../standby-cluster.ts';
import { nodeArgs } from '../ts-node-args.ts';
import {
  type Reader,
  type ReaderRun,
  makeReaders,
  newTally,
  outageProbe,
  position,
  runReader,
  tallyLine,
} from './readers.ts';

export interface ChaosOptions {
  seed: number;
  durationS: number;
  readers: number;
  streams: number;
  replicas: number;
  /** Run on a primary + streaming standby (the standby listens on pgPort + 1) with reads on the standby. */
  standby?: boolean;
  /** Run the services and SQL writers through a PgBouncer in transaction mode (test/pgbouncer.ts). */
  pooler?: boolean;
  pgPort: number;
  basePort: number;
  /** Progress lines on stderr. */
  verbose: boolean;
}

export interface ChaosResult {
  ok: boolean;
  verdict: string;
  counts: Record<string, number>;
}

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
/** Faults a run injects however slow the machine (test/chaos.test.ts asks for this many). */
export const MIN_FAULTS = 3;

/** Deterministic PRNG (mulberry32): the same seed gives the same choices (timing still varies). */
function rng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (lo: number, hi: number) => lo + Math.floor(next() * (hi - lo + 1)),
    pick: <T>(xs: readonly T[]): T => xs[Math.floor(next() * xs.length)],
    chance: (p: number) => next() < p,
  };
}
type Rng = ReturnType<typeof rng>;

// ---------------------------------------------------------------------------------------------
// Processes: the embedded PostgreSQL and the service replicas.

class Service {
  proc: ChildProcess | undefined;
  up = false;
  starts = 0;
  constructor(
    readonly port: number,
    readonly databaseUrl: string,
    readonly logFile: string,
    readonly env: Record<string, string> = {},
  ) {}
  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  async start(deadline = Date.now() + 180_000): Promise<void> {
    const fd = openSync(this.logFile, 'a');
    this.proc = spawn(process.execPath, nodeArgs('src/main.ts'), {
      cwd: ROOT,
      env: {
        ...process.env,
        PORT: String(this.port),
        HOST: '127.0.0.1',
        DATABASE_URL: this.databaseUrl,
        LOG_LEVEL: 'warn',
        POLL_INTERVAL: '250ms',
        SSE_RETRY: '100ms',
        STATEMENT_TIMEOUT: '5s',
        POOL_SIZE: '6',
        // The tail floor close behind what it proved (1h in production): the faults cross it.
        TAIL_FLOOR_MARGIN: '50ms',
        ...this.env,
      },
      stdio: ['ignore', fd, fd],
    });
    closeSync(fd);
    this.starts++;
    const proc = this.proc;
    proc.on('exit', () => {
      if (this.proc === proc) this.up = false;
    });
    // Ready once /readyz answers 200 (database, LISTEN and tailer all up).
    while (Date.now() < deadline) {
      if (proc.exitCode !== null || proc.signalCode !== null) {
        // It can fail to start while PostgreSQL restarts: try again (within the same deadline).
        await sleep(200);
        if (Date.now() < deadline) return this.start(deadline);
        break;
      }
      try {
        const res = await fetch(`${this.url}/readyz`);
        await res.arrayBuffer();
        if (res.status === 200) {
          this.up = true;
          return;
        }
      } catch {
        // not listening yet
      }
      await sleep(100);
    }
    proc.kill('SIGKILL');
    throw new Error(`service on port ${this.port} did not become ready in 180 s (log: ${this.logFile})`);
  }

  /** kill -9: no shutdown at all. */
  async kill(): Promise<void> {
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    this.up = false;
    const exited = new Promise<void>((r) => p.once('exit', () => r()));
    p.kill('SIGKILL');
    await exited;
  }
}

// ---------------------------------------------------------------------------------------------
// What the writers know.

type Outcome = 'committed' | 'rolledback' | 'unknown';

interface Ledger {
  /** key → outcome (and the id, when the writer learnt it). */
  keys: Map<string, { stream: string; outcome: Outcome; id?: string }>;
  /** keys that got a 503 at least once (each must turn out not to have committed then). */
  got503: Set<string>;
  /** keys whose 503 turned out to have committed (a retry said duplicate). Must stay empty. */
  committedAfter503: string[];
  /** keys answered 503 commit_unknown at least once (may have committed; resolved by the retry). */
  commitUnknown: Set<string>;
  /** A writer saw the same key answered with two different ids. Must stay empty. */
  idMismatch: string[];
  httpPublishes: number;
  batchPublishes: number;
  sqlCommits: number;
  sqlRollbacks: number;
  sqlErrors: number;
  lastSqlError?: string;
  retries: number;
}

function record(ledger: Ledger, key: string, stream: string, outcome: Outcome, tagged?: string): void {
  const id = tagged === undefined ? undefined : position(tagged);
  const prev = ledger.keys.get(key);
  if (prev?.id !== undefined && id !== undefined && prev.id !== id)
    ledger.idMismatch.push(`${key}: ${prev.id} vs ${id}`);
  ledger.keys.set(key, { stream, outcome, id: id ?? prev?.id });
}

// ---------------------------------------------------------------------------------------------

export async function runChaos(opts: ChaosOptions): Promise<ChaosResult> {
  const r = rng(opts.seed);
  const log = (msg: string) => {
    if (opts.verbose) process.stderr.write(`[chaos ${new Date().toISOString().slice(11, 23)}] ${msg}\n`);
  };
  const work = path.join(os.tmpdir(), `commitfeed-chaos-${opts.pgPort}`);
  mkdirSync(work, { recursive: true });
  const streams = Array.from({ length: opts.streams }, (_, i) => `chaos-${i}`);
  const services: Service[] = [];
  const pools: Kysely<Database>[] = [];
  let pgdb: EmbeddedDatabase | undefined;
  let cluster: StandbyCluster | undefined;
  let bouncer: PgBouncer | undefined;
  const teardowns: (() => unknown)[] = [];
  let pgDown = false;
  let stopped = false;
  const killAll = () => {
    for (const s of services) s.proc?.kill('SIGKILL');
  };
  process.once('exit', killAll);

  const counts: Record<string, number> = {
    faults: 0,
    killService: 0,
    restartPg: 0,
    killListen: 0,
    killPooled: 0,
    holdTx: 0,
    pauseReplay: 0,
    restartStandby: 0,
    restartPooler: 0,
  };

  try {
    log(`starting PostgreSQL on ${opts.pgPort} in ${work}${opts.standby ? ' (and a standby)' : ''}`);
    const pgDir = path.join(work, 'pg');
    // The cluster is kept between runs (initdb costs seconds); every run gets a fresh database. A
    // standby pair is made afresh (test/standby-cluster.ts).
    if (opts.standby)
      cluster = await startStandbyCluster({ port: opts.pgPort, dir: path.join(work, 'standby') });
    else pgdb = await startEmbeddedPostgres({ dir: pgDir, port: opts.pgPort });
    const pgUrl = cluster ? cluster.primaryUrl : pgdb!.url;
    const dbName = `chaos_${process.pid}_${Date.now()}`;
    {
      const c = new pg.Client({ connectionString: pgUrl });
      await c.connect();
      const { rows: old } = await c.query<{ datname: string }>(
        "select datname from pg_database where datname like 'chaos\\_%'",
      );
      for (const o of old) await c.query(`drop database if exists ${o.datname} with (force)`);
      await c.query(`create database ${dbName}`);
      await c.end();
    }
    const inDb = (url: string) => {
      const u = new URL(url);
      u.pathname = `/${dbName}`;
      return u.toString();
    };
    const dbUrl = inDb(pgUrl);
    const readEnv: Record<string, string> = cluster
      ? { READ_DATABASE_URL: inDb(cluster.standbyUrl), READ_LAG_WAIT: '300ms' }
      : {};
    log(`PostgreSQL up; database ${dbName}`);
    if (opts.pooler) {
      bouncer = await startPgBouncer({ teardown: (fn) => teardowns.push(fn) }, dbUrl);
      readEnv.DIRECT_DATABASE_URL = dbUrl;
      log(`PgBouncer (transaction mode) on ${bouncer.port}`);
    }
    // What the services and the SQL writers connect to; the truth is read from PostgreSQL itself.
    const appUrl = bouncer ? bouncer.url(dbUrl) : dbUrl;
    /** `whileDown`: called once PostgreSQL is down, before it starts again. */
    const restartPg = async (whileDown: () => void) => {
      pgDown = true;
      if (cluster) await cluster.stopPrimary();
      else await pgdb!.stop();
      whileDown();
      await sleep(r.int(200, 1200));
      if (cluster) await cluster.startPrimary();
      else pgdb = await startEmbeddedPostgres({ dir: pgDir, port: opts.pgPort });
      pgDown = false;
    };
    const admin = async <T>(fn: (c: pg.Client) => Promise<T>): Promise<T | undefined> => {
      const c = new pg.Client({ connectionString: dbUrl, application_name: 'chaos-admin' });
      c.on('error', () => {});
      try {
        await c.connect();
        return await fn(c);
      } catch {
        return undefined;
      } finally {
        await c.end().catch(() => {});
      }
    };

    // Replicas: the first one migrates alone, the others start together with it racing nothing.
    for (let i = 0; i < opts.replicas; i++) {
      services.push(new Service(opts.basePort + i, appUrl, path.join(work, `service-${i}.log`), readEnv));
    }
    await Promise.all(services.map((s) => s.start()));
    log(`${services.length} service processes ready`);

    const sqlDb = (url = appUrl, connectMs = 3000) => {
      const pool = new pg.Pool({
        connectionString: url,
        max: 4,
        application_name: 'chaos-writer',
        connectionTimeoutMillis: connectMs,
      });
      pool.on('error', () => {});
      pool.on('connect', (c) => c.on('error', () => {}));
      const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
      pools.push(db);
      return db;
    };

    const ledger: Ledger = {
      keys: new Map(),
      got503: new Set(),
      committedAfter503: [],
      commitUnknown: new Set(),
      idMismatch: [],
      httpPublishes: 0,
      batchPublishes: 0,
      sqlCommits: 0,
      sqlRollbacks: 0,
      sqlErrors: 0,
      retries: 0,
    };
    let keySeq = 0;
    const newKey = (w: string) => `${w}.${keySeq++}`;
    const ev = (stream: string, key: string, w: string) => ({ data: { s: stream, k: key, w }, key });

    // ---- readers (test/chaos/readers.ts)
    const readers = makeReaders(opts.readers, streams, r);
    let draining = false;
    const readerDone = new Set<Reader>();
    let expectedFinal: Map<Reader, string[]> | undefined;
    const caughtUp = (rd: Reader): boolean => {
      const exp = expectedFinal?.get(rd);
      if (!exp) return false;
      if (exp.length === 0) return rd.startAfter !== undefined;
      const last = exp[exp.length - 1];
      return rd.received.length >= exp.length && rd.received.some((x) => x.id === last);
    };

    // ---- writers
    const writerTasks: Promise<void>[] = [];
    const publishHttp = async (w: string, rr: Rng, batch: boolean): Promise<void> => {
      const stream = rr.pick(streams);
      const n = batch ? rr.int(2, 20) : 1;
      const items = Array.from({ length: n }, () => ev(stream, newKey(w), w));
      for (const it of items) record(ledger, it.key, stream, 'unknown');
      const body = batch ? items : items[0];
      // Until the outcome is known: the same keys make a retry safe. `ambiguous`: an attempt whose
      // outcome nobody knows (the connection broke after the request was sent).
      let ambiguous = false;
      let had503 = false;
      for (let attempt = 0; ; attempt++) {
        if (attempt > 0) {
          ledger.retries++;
          await sleep(rr.int(100, 400));
        }
        const svc = rr.pick(services);
        let status = 0;
        let json: { id?: string; duplicate?: boolean; events?: { id: string; duplicate: boolean }[] } = {};
        try {
          const res = await fetch(`${svc.url}/v1/streams/${stream}/events`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify(body),
            signal: AbortSignal.timeout(15_000),
          });
          status = res.status;
          json = (await res.json()) as typeof json;
        } catch (err) {
          // Refused: never reached a server. Anything else (reset, killed server): unknown.
          if ((err as { cause?: { code?: string } }).cause?.code !== 'ECONNREFUSED') ambiguous = true;
          if (stopped) return;
          continue;
        }
        if (status === 503 && (json as { code?: string }).code === 'commit_unknown') {
          // The connection was lost during the COMMIT: stored or not, the retry's answer tells.
          ambiguous = true;
          for (const it of items) ledger.commitUnknown.add(it.key);
          if (stopped) return;
          continue;
        }
        if (status === 503) {
          had503 = true;
          for (const it of items) ledger.got503.add(it.key);
          if (stopped) return;
          continue;
        }
        if (status !== 200 && status !== 201)
          throw new Error(`publish answered ${status}: ${JSON.stringify(json)}`);
        const results = batch ? json.events! : [{ id: json.id!, duplicate: json.duplicate! }];
        results.forEach((res, i) => {
          const key = items[i].key;
          // A duplicate means an earlier attempt of this call committed (keys are unique). If every
          // earlier attempt was answered 503 or refused, a 503 committed: a broken promise.
          if (res.duplicate && had503 && !ambiguous) ledger.committedAfter503.push(key);
          record(ledger, key, stream, 'committed', res.id);
        });
        if (batch) ledger.batchPublishes++;
        else ledger.httpPublishes++;
        return;
      }
    };
    const sqlWriter = async (w: string, rr: Rng, db: Kysely<Database>): Promise<void> => {
      const stream = rr.pick(streams);
      const n = rr.int(1, 5);
      const inputs: EventInput[] = Array.from({ length: n }, () => {
        const key = newKey(w);
        return {
          stream,
          type: rr.chance(0.5) ? 'sql' : null,
          key,
          data: JSON.stringify({ s: stream, k: key, w }),
        };
      });
      const commit = rr.chance(0.7);
      const holdMs = rr.int(0, 200);
      for (const e of inputs) record(ledger, e.key!, stream, 'unknown');
      let ids: string[] | undefined;
      try {
        await db.transaction().execute(async (trx) => {
          const res = await appendEvents(trx, inputs);
          ids = res.map((x) => x.id);
          await sleep(holdMs);
          if (!commit) throw new RolledBack();
        });
        for (const [i, e] of inputs.entries()) record(ledger, e.key!, stream, 'committed', ids![i]);
        ledger.sqlCommits++;
      } catch (err) {
        if (err instanceof RolledBack) {
          for (const e of inputs) record(ledger, e.key!, stream, 'rolledback');
          ledger.sqlRollbacks++;
        }
        // else: the connection died somewhere, maybe at COMMIT: unknown, resolved from the table.
        else {
          ledger.sqlErrors++;
          ledger.lastSqlError = (err as Error).message;
        }
      }
    };

    /** An unexpected answer (e.g. a 500) ends the run as a failure, after cleaning up. */
    let fatal: string | undefined;
    const guard = (p: Promise<void>) =>
      p.catch((err: Error) => {
        fatal ??= err.message;
      });
    const t0 = Date.now();
    const until = t0 + opts.durationS * 1000;
    // The writers go on until the faults are over and 3 s more (the last outage heals), and at least
    // until `until`. A fault takes longer on a loaded machine (a PostgreSQL restart waits for every
    // replica to be ready): the faults then go on past their window until MIN_FAULTS were injected,
    // so that a slow run still tests something, bounded by three times the duration.
    let writeUntil = Number.POSITIVE_INFINITY;
    const wr = (i: number) => rng(opts.seed * 1000 + i);
    let wn = 0;
    for (let i = 0; i < 6; i++) {
      const rr = wr(wn++);
      const name = `h${i}`;
      writerTasks.push(
        guard(
          (async () => {
            while (Date.now() < writeUntil && !fatal) {
              await publishHttp(name, rr, i % 3 === 2);
              await sleep(rr.int(0, 40));
            }
          })(),
        ),
      );
    }
    for (let i = 0; i < 4; i++) {
      const rr = wr(wn++);
      const db = sqlDb();
      const name = `q${i}`;
      writerTasks.push(
        guard(
          (async () => {
            while (Date.now() < writeUntil) {
              if (pgDown) {
                await sleep(50);
                continue;
              }
              await sqlWriter(name, rr, db);
              await sleep(rr.int(0, 60));
            }
          })(),
        ),
      );
    }
    const tally = newTally(t0);
    const run: ReaderRun = {
      services,
      tally,
      stopped: () => stopped,
      draining: () => draining,
      caughtUp,
      done: (rd) => readerDone.add(rd),
    };
    const readerTasks = readers.map((rd) => runReader(rd, rng(opts.seed * 7919 + rd.n), run));

    // ---- faults, until 3 s before the end (so the last outage has time to heal before draining)
    const fr = rng(opts.seed ^ 0x5eed);
    const faultUntil = until - 3000;
    const faultLog: string[] = [];
    const holdDb = sqlDb();
    const restarts: Promise<void>[] = [];
    const kinds = ['killService', 'restartPg', 'killListen', 'killPooled', 'holdTx'];
    if (cluster) kinds.push('pauseReplay', 'restartStandby');
    if (bouncer) kinds.push('restartPooler');
    let deck: string[] = [];
    // While the database or the pooler is down: an SSE request to every replica that is up.
    const probes: Promise<string | undefined>[] = [];
    const probe = (during: string) => {
      for (const s of services) if (s.up) probes.push(outageProbe(run, s, during));
    };
    const faults = (async () => {
      await sleep(1000);
      const lastChance = t0 + 3 * opts.durationS * 1000;
      while (Date.now() < faultUntil || (counts.faults < MIN_FAULTS && Date.now() < lastChance)) {
        // Every kind once per round, in a seeded order: a short run still sees each of them.
        if (deck.length === 0) {
          deck = [...kinds].sort(() => fr.next() - 0.5);
          // Standby and pooler modes: their own faults come first, so a short run sees them too.
          if (counts.faults === 0 && (cluster || bouncer)) deck.sort((a, b) => modeFirst(a) - modeFirst(b));
        }
        const kind = deck.pop()!;
        counts.faults++;
        counts[kind]++;
        faultLog.push(`${((Date.now() - t0) / 1000).toFixed(1)}s ${kind}`);
        log(`fault: ${kind}`);
        if (kind === 'killService') {
          const svc = fr.pick(services.filter((s) => s.up));
          if (svc) {
            await svc.kill();
            // Restarted in the background (start-up takes seconds): other faults go on meanwhile.
            const delay = fr.int(0, 800);
            restarts.push(sleep(delay).then(() => svc.start()));
          }
        } else if (kind === 'restartPg') {
          await restartPg(() => probe('a PostgreSQL restart'));
          // The services heal on their own; wait until they say so before the next fault.
          await Promise.all(services.map((s) => waitReady(s)));
        } else if (kind === 'pauseReplay' && cluster) {
          // The standby lags while writes go on: woken reads wait, then fall over to the primary.
          await cluster.pause().catch(() => {});
          await sleep(fr.int(300, 1500));
          await cluster.resume().catch(() => {});
        } else if (kind === 'restartStandby' && cluster) {
          await cluster.stopStandby();
          await sleep(fr.int(200, 1200));
          await cluster.startStandby();
        } else if (kind === 'restartPooler' && bouncer) {
          // Every pooled connection cut at once, and none to be had for a moment.
          await bouncer.stop();
          probe('a PgBouncer restart');
          await sleep(fr.int(100, 800));
          await bouncer.start();
        } else if (kind === 'killListen' || (kind === 'killPooled' && !bouncer)) {
          const app = kind === 'killListen' ? 'commitfeed-listen' : 'commitfeed';
          await admin((c) =>
            c.query('select pg_terminate_backend(pid) from pg_stat_activity where application_name = $1', [
              app,
            ]),
          );
        } else if (kind === 'killPooled') {
          // PgBouncer's server connections carry no name of ours: every other client backend of the
          // database but the LISTEN connections (the tail reads' and the janitor's go too).
          await admin((c) =>
            c.query(
              `select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database()
                 and backend_type = 'client backend' and pid <> pg_backend_pid()
                 and application_name not in ('commitfeed-listen', 'chaos-admin')`,
            ),
          );
        } else {
          // A writing transaction held open for seconds: the horizon stalls, delivery pauses, and
          // resumes when it ends (its commit may be the only thing that happens).
          const stream = fr.pick(streams);
          const key = newKey('hold');
          record(ledger, key, stream, 'unknown');
          const commit = fr.chance(0.5);
          const holdMs = fr.int(500, 2500);
          try {
            let id = '';
            await holdDb.transaction().execute(async (trx) => {
              [{ id }] = await appendEvents(trx, [
                { stream, type: 'held', key, data: JSON.stringify({ s: stream, k: key, w: 'hold' }) },
              ]);
              await sleep(holdMs);
              if (!commit) throw new RolledBack();
            });
            record(ledger, key, stream, 'committed', id);
          } catch (err) {
            if (err instanceof RolledBack) record(ledger, key, stream, 'rolledback');
          }
        }
        await sleep(fr.int(300, 1500));
      }
    })().finally(() => {
      writeUntil = Math.max(until, Date.now() + 3000);
    });

    await faults;
    await Promise.all(writerTasks);
    await Promise.all(restarts);
    const probeProblems = (await Promise.all(probes)).filter((p) => p !== undefined);
    // Heal: every replica up and ready before the truth is read.
    for (const s of services) if (!s.up) await s.start();
    await Promise.all(services.map((s) => waitReady(s)));
    log('writers done; reading the truth from the table');

    // ---- the truth: the table, cross-checked with what the writers know
    // Generous: a connect that took over 3 s on a loaded machine once failed a passing run here.
    const check = sqlDb(dbUrl, 30_000);
    // Every row but the services' self-check markers, which no writer wrote and no reader sees.
    const { rows } = await sql<{ cursor: string; stream: string; key: string | null }>`
      select txid::text || '-' || id::text as cursor, stream, key from commitfeed.feed
      where stream <> ${MARKER_STREAM} order by txid, id`.execute(check);
    const inTable = new Map<string, { cursor: string; stream: string }>();
    for (const row of rows) if (row.key !== null) inTable.set(row.key, row);
    const problems: string[] = [...probeProblems];
    let unknownResolved = 0;
    for (const [key, k] of ledger.keys) {
      const row = inTable.get(key);
      if (k.outcome === 'committed') {
        if (!row) problems.push(`committed ${key} (${k.id}) is not in the table`);
        else if (row.cursor !== k.id)
          problems.push(`committed ${key}: writer got ${k.id}, table has ${row.cursor}`);
      } else if (k.outcome === 'rolledback') {
        if (row) problems.push(`rolled-back ${key} is in the table at ${row.cursor}`);
      } else unknownResolved++;
    }
    if (rows.length !== inTable.size || [...inTable.keys()].some((k) => !ledger.keys.has(k))) {
      problems.push('the table holds rows no writer wrote');
    }
    for (const m of ledger.idMismatch) problems.push(`id mismatch: ${m}`);
    for (const k of ledger.committedAfter503) problems.push(`${k} was answered 503 but had committed`);

    // Expected sequences per reader, from the table order.
    const parsed = rows.map((row) => parseCursor(row.cursor)!);
    const final = new Map<Reader, string[]>();
    for (const rd of readers) {
      const set = new Set(rd.streams);
      const after = rd.startAfter ? parseCursor(rd.startAfter) : undefined;
      const exp: string[] = [];
      if (after) {
        rows.forEach((row, i) => {
          if (set.has(row.stream) && compareCursors(parsed[i], after) > 0) exp.push(row.cursor);
        });
      }
      final.set(rd, exp);
    }
    expectedFinal = final;
    draining = true;
    log('draining readers');
    const drainDeadline = Date.now() + 30_000;
    while (Date.now() < drainDeadline && readerDone.size < readers.length) await sleep(100);
    stopped = true;
    await Promise.all(readerTasks);

    // ---- verdict
    const keyOf = new Map(rows.map((row) => [row.cursor, row.key ?? '']));
    let delivered = 0;
    let firstDivergence: string | undefined;
    let failedReaders = 0;
    for (const rd of readers) {
      const exp = final.get(rd)!;
      const got = rd.received.map((x) => x.id);
      delivered += got.length;
      const n = Math.max(exp.length, got.length);
      for (let i = 0; i < n; i++) {
        if (exp[i] === got[i]) continue;
        failedReaders++;
        if (!firstDivergence) {
          const g = got[i];
          const what =
            g === undefined
              ? 'nothing (missing events)'
              : !keyOf.has(g)
                ? `${g} (key ${rd.received[i].key}: NOT COMMITTED)`
                : got.indexOf(g) < i
                  ? `${g} (a DUPLICATE of index ${got.indexOf(g)})`
                  : `${g} (out of order or a gap before it)`;
          firstDivergence =
            `reader ${rd.n} (${rd.kind}, ${rd.mode}, streams ${rd.streams.join('+')}, after ${rd.startAfter}, ${rd.connects} connects) ` +
            `at index ${i} of ${exp.length}: expected ${exp[i] ?? 'the end'} (key ${keyOf.get(exp[i]) ?? '-'}), got ${what}`;
        }
        break;
      }
    }
    const committed = rows.length;
    const rolledBack = [...ledger.keys.values()].filter((k) => k.outcome === 'rolledback').length;
    Object.assign(counts, {
      committed,
      rolledBack,
      unknownResolved,
      got503: ledger.got503.size,
      retries: ledger.retries,
      readers: readers.length,
      connects: tally.connects,
      sse200: tally.ok,
      sseNon200: [...tally.other.values()].reduce((a, n) => a + n, 0),
      sseRefused: tally.refused,
      sseCut: tally.cutBeforeAnswer,
      sseLeft: tally.leftBeforeAnswer,
      eventSourceGaveUp: readers.filter((rd) => rd.gaveUp).length,
      delivered,
      failedReaders,
      serviceStarts: services.reduce((a, s) => a + s.starts, 0),
    });
    if (fatal) problems.unshift(`fatal: ${fatal}`);
    // Any SSE answer but 200 fails the run: an EventSource would never reconnect (test/chaos/readers.ts).
    const ok = failedReaders === 0 && problems.length === 0 && counts.sseNon200 === 0;
    log(
      `writers: ${ledger.httpPublishes} single + ${ledger.batchPublishes} batch HTTP publishes, ${ledger.retries} retries; ` +
        `SQL: ${ledger.sqlCommits} commits, ${ledger.sqlRollbacks} rollbacks, ${ledger.sqlErrors} lost (${ledger.lastSqlError ?? '-'})`,
    );
    const es = readers.filter((rd) => rd.kind === 'eventsource');
    log(
      `readers: ${readers.length - es.length} fetch, ${es.length} EventSource (${es.reduce((a, rd) => a + rd.connects, 0)} connects, ` +
        `${es.reduce((a, rd) => a + rd.received.length, 0)} deliveries)`,
    );
    const verdict =
      `chaos ${ok ? 'PASS' : 'FAIL'} seed=${opts.seed} ${opts.durationS}s: ${committed} events committed ` +
      `(${rolledBack} rolled back, ${unknownResolved} unknown resolved from the table, ${ledger.got503.size} got a 503, ` +
      `${ledger.committedAfter503.length} of those had committed, ${ledger.commitUnknown.size} got commit_unknown), ${readers.length} readers over ${streams.length} streams, ` +
      `${tallyLine(tally)}, ${delivered} deliveries, faults=${counts.faults} ` +
      `(kill -9 ${counts.killService}, pg restart ${counts.restartPg}, listen cut ${counts.killListen}, pool cut ${counts.killPooled}, held tx ${counts.holdTx}` +
      (cluster ? `, replay paused ${counts.pauseReplay}, standby restart ${counts.restartStandby}` : '') +
      (bouncer ? `, pooler restart ${counts.restartPooler}` : '') +
      '); ' +
      `${failedReaders} readers diverged` +
      (tally.firstOther ? `; SSE answered non-200, first: ${tally.firstOther}` : '') +
      (counts.eventSourceGaveUp ? `; ${counts.eventSourceGaveUp} EventSource readers gave up for good` : '') +
      (firstDivergence ? `; first divergence: ${firstDivergence}` : '') +
      (problems.length
        ? `; writer/table problems (${problems.length}): ${problems.slice(0, 3).join('; ')}`
        : '');
    if (!ok) log(`faults: ${faultLog.join(', ')}; service logs in ${work}`);
    return { ok, verdict, counts };
  } finally {
    stopped = true;
    killAll();
    await Promise.all(services.map((s) => s.kill()));
    await Promise.all(pools.map((p) => p.destroy().catch(() => {})));
    await pgdb?.stop().catch(() => {});
    await cluster?.stop().catch(() => {});
    for (const fn of teardowns.splice(0).reverse()) await Promise.resolve(fn()).catch(() => {});
    process.removeListener('exit', killAll);
  }
}

class RolledBack extends Error {}

/** Sort key that puts the standby and pooler faults at the end of a deck (popped first). */
function modeFirst(kind: string): number {
  return kind === 'pauseReplay' || kind === 'restartStandby' || kind === 'restartPooler' ? 1 : 0;
}

async function waitReady(s: Service): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (!s.up) return; // being restarted by someone else
    try {
      const res = await fetch(`${s.url}/readyz`);
      await res.arrayBuffer();
      if (res.status === 200) return;
    } catch {
      // restarting
    }
    await sleep(100);
  }
  throw new Error(`service on port ${s.port} did not become ready again within 30 s (log: ${s.logFile})`);
}

function arg(name: string, dflt: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  const result = await runChaos({
    seed: arg('seed', 42),
    durationS: arg('duration', 60),
    readers: arg('readers', 60),
    streams: arg('streams', 5),
    replicas: arg('replicas', 2),
    standby: process.argv.includes('--standby'),
    pooler: process.argv.includes('--pooler'),
    pgPort: arg('pg-port', 25360),
    basePort: arg('port', 25370),
    verbose: !process.argv.includes('--quiet'),
  });
  console.log(result.verdict);
  process.exit(result.ok ? 0 : 1);
}
