// Where a queue job's time goes: commitfeed over HTTP beside graphile-worker (and pg-boss, if asked)
// through their native APIs, on one PostgreSQL, measured per job rather than per second (this machine
// is shared; CPU per job is steadier than a rate). For each measure and system, in rounds that
// alternate the order of the systems:
//   server CPU per job (commitfeed's server process), load CPU per job (the client process),
//   PostgreSQL CPU per job (this database's client backends, from /proc/<pid>/stat),
//   statements per job (counted in every process's node-postgres, bench/lib/count-statements.mjs)
//   and transactions per job (pg_stat_database), and the statements that make them up.
// Measures: enqueue 100 per call × 8 senders; a backlog drained by N workers claiming 10 (ack on the
// next claim); enqueue → start at a steady rate with N idle workers.
//
//   npx tsx bench/experiments/queue-profile.ts --help
import { mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { benchFile } from '../lib/context.ts';
import { spawnNode, stop, waitForHttp, Worker } from '../lib/proc.ts';
import { fmtMs, fmtNum, markdownTable, type Table, textTable } from '../lib/report.ts';
import { cpuSeconds, pidsByName, treeCpuSeconds } from '../lib/sys.ts';
import { summarizeProfile } from '../lib/profile.ts';
import type { LoadArgs, Measure, MeasureResult, System } from '../workers/queue-load.ts';

const HELP = `npx tsx bench/experiments/queue-profile.ts [options]
  --db NAME             database on 127.0.0.1:5432, dropped and created (default commitfeed_qprof)
  --port N              commitfeed's port (default 3240)
  --systems a,b         commitfeed-http,graphile-worker (default); also pg-boss, commitfeed-sql
  --measures a,b        batch,backlog,latency (default: all three)
  --rounds N            rounds, each alternating the systems' order (default 2)
  --seconds N           batch enqueue seconds (default 8)
  --backlog N           backlog jobs (default 20000)
  --workers N           workers draining the backlog and waiting in the latency measure (default 8)
  --rate N              latency: jobs per second (default 200)
  --latency-jobs N      latency: jobs (default 1000)
  --server-dir DIR      run commitfeed's server from another checkout (before → after)
  --cpu-prof DIR        write the server's V8 CPU profile there and summarise it
  --top N               statements listed per row (default 6)
  --explain-slow MS     log plans of statements slower than MS (auto_explain, nested statements too)
                        to PostgreSQL's server log`;

const { values: v } = parseArgs({
  options: {
    help: { type: 'boolean' },
    db: { type: 'string' },
    port: { type: 'string' },
    systems: { type: 'string' },
    measures: { type: 'string' },
    rounds: { type: 'string' },
    seconds: { type: 'string' },
    backlog: { type: 'string' },
    workers: { type: 'string' },
    rate: { type: 'string' },
    'latency-jobs': { type: 'string' },
    'server-dir': { type: 'string' },
    'cpu-prof': { type: 'string' },
    top: { type: 'string' },
    'explain-slow': { type: 'string' },
  },
});
if (v.help) {
  process.stdout.write(`${HELP}\n`);
  process.exit(0);
}
const DB = v.db ?? 'commitfeed_qprof';
const PORT = Number(v.port ?? 3240);
const SYSTEMS = (v.systems ?? 'commitfeed-http,graphile-worker').split(',') as System[];
const MEASURES = (v.measures ?? 'batch,backlog,latency').split(',');
const ROUNDS = Number(v.rounds ?? 2);
const SECONDS = Number(v.seconds ?? 8);
const BACKLOG = Number(v.backlog ?? 20_000);
const WORKERS = Number(v.workers ?? 8);
const RATE = Number(v.rate ?? 200);
const LAT_JOBS = Number(v['latency-jobs'] ?? 1000);
const TOP = Number(v.top ?? 6);
const ADMIN = 'postgres://postgres@127.0.0.1:5432/postgres';
const URL = `postgres://postgres@127.0.0.1:5432/${DB}`;
const COUNTS = `${tmpdir()}/commitfeed-statement-counts-${process.pid}`;
const HOOK = benchFile('lib/count-statements.mjs');
const say = (m: string) => process.stderr.write(`${m}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** CPU seconds of this database's client backends, per pid (background processes left out: they
 * serve every database of a shared server). */
function backendCpu(): Map<number, number> {
  const out = new Map<number, number>();
  for (const pid of pidsByName('postgres')) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
      const m = /^postgres: \S+: \S+ (\S+) /.exec(cmd);
      if (!m || m[1] !== DB) continue;
      const c = cpuSeconds(pid);
      if (!Number.isNaN(c)) out.set(pid, c);
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

async function statementCounts(pids: number[]): Promise<Map<string, number>> {
  for (const pid of pids) rmSync(`${COUNTS}/${pid}.json`, { force: true });
  for (const pid of pids) process.kill(pid, 'SIGUSR2');
  const out = new Map<string, number>();
  for (const pid of pids) {
    let text = '';
    for (let i = 0; i < 50 && text === ''; i++) {
      try {
        text = readFileSync(`${COUNTS}/${pid}.json`, 'utf8');
      } catch {
        await sleep(20);
      }
    }
    for (const [k, n] of Object.entries(JSON.parse(text || '{}') as Record<string, number>))
      out.set(k, (out.get(k) ?? 0) + n);
  }
  return out;
}

interface Mark {
  server: number;
  load: number;
  backends: Map<number, number>;
  xacts: number;
  statements: Map<string, number>;
}

async function mark(admin: pg.Client, serverPid: number, loadPid: number): Promise<Mark> {
  // Backends report their transaction counts once idle for a second (PostgreSQL 15).
  await sleep(1200);
  const { rows } = await admin.query<{ n: string }>(
    'select (xact_commit + xact_rollback)::text as n from pg_stat_database where datname = $1',
    [DB],
  );
  return {
    server: treeCpuSeconds(serverPid),
    load: cpuSeconds(loadPid),
    backends: backendCpu(),
    xacts: Number(rows[0].n),
    statements: await statementCounts([serverPid, loadPid]),
  };
}

interface Row {
  system: System;
  measure: string;
  round: number;
  load: string;
  result: MeasureResult;
  jobs: number;
  serverUs: number;
  loadUs: number;
  pgUs: number;
  statements: number;
  xacts: number;
  top: [string, number][];
}

function perJob(
  system: System,
  measure: string,
  round: number,
  a: Mark,
  b: Mark,
  r: MeasureResult,
  la: string,
) {
  const jobs = r.done;
  let pgSec = 0;
  for (const [pid, s] of b.backends) pgSec += Math.max(0, s - (a.backends.get(pid) ?? 0));
  const delta = new Map<string, number>();
  for (const [k, n] of b.statements) {
    const d = n - (a.statements.get(k) ?? 0);
    if (d > 0) delta.set(k, d);
  }
  const statements = [...delta.values()].reduce((x, y) => x + y, 0);
  return {
    system,
    measure,
    round,
    load: la,
    result: r,
    jobs,
    serverUs: system === 'commitfeed-http' ? ((b.server - a.server) / jobs) * 1e6 : Number.NaN,
    loadUs: ((b.load - a.load) / jobs) * 1e6,
    pgUs: (pgSec / jobs) * 1e6,
    statements: statements / jobs,
    xacts: (b.xacts - a.xacts) / jobs,
    top: [...delta].sort((x, y) => y[1] - x[1]).slice(0, TOP),
  } satisfies Row;
}

async function main(): Promise<void> {
  mkdirSync(COUNTS, { recursive: true });
  const admin = new pg.Client({ connectionString: ADMIN });
  await admin.connect();
  await admin.query(`drop database if exists ${DB} with (force)`);
  await admin.query(`create database ${DB}`);
  if (v['explain-slow']) {
    await admin.query(`alter database ${DB} set session_preload_libraries = 'auto_explain'`);
    await admin.query(
      `alter database ${DB} set auto_explain.log_min_duration = '${Number(v['explain-slow'])}ms'`,
    );
    await admin.query(`alter database ${DB} set auto_explain.log_nested_statements = on`);
  }
  const env = { STATEMENT_COUNTS_DIR: COUNTS };
  const hook = ['--import', HOOK];
  if (v['cpu-prof']) rmSync(v['cpu-prof'], { recursive: true, force: true });
  const server = spawnNode('src/main.ts', [], {
    cwd: v['server-dir'],
    nodeFlags: [...hook, ...(v['cpu-prof'] ? ['--cpu-prof', '--cpu-prof-dir', v['cpu-prof']] : [])],
    env: {
      ...env,
      DATABASE_URL: URL,
      PORT: String(PORT),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
      POOL_SIZE: '10',
      JANITOR_INTERVAL: '0',
      SELF_CHECK_INTERVAL: '0',
      AUTH: 'off',
    },
    logFile: benchFile('.logs/queue-profile-server.log'),
  });
  const base = `http://127.0.0.1:${PORT}`;
  await waitForHttp(`${base}/healthz`, server, 60_000);
  const workers = new Map<System, Worker<never>>();
  for (const system of SYSTEMS) {
    const args: LoadArgs = { system, databaseUrl: URL, baseUrl: base, poolSize: 10 };
    workers.set(
      system,
      new Worker<never>(system, benchFile('workers/queue-load.ts'), args, { nodeFlags: hook, env }),
    );
  }
  let seq = 0;
  const rows: Row[] = [];
  const measureOf = (name: string, queue: string): Measure => {
    if (name === 'batch') return { kind: 'enqueue', queue, senders: 8, batch: 100, seconds: SECONDS };
    if (name === 'backlog')
      return { kind: 'process', queue, workers: WORKERS, jobs: BACKLOG, timeoutSec: 300 };
    return { kind: 'latency', queue, workers: WORKERS, jobs: LAT_JOBS, rate: RATE };
  };
  for (const system of SYSTEMS) {
    say(`warm-up ${system}`);
    const w = workers.get(system)!;
    const queue = `w${++seq}`;
    await w.run({ kind: 'enqueue', queue, senders: 8, batch: 100, seconds: 2 }, 120_000);
    await w.run({ kind: 'process', queue, workers: WORKERS, jobs: 2000, timeoutSec: 60 }, 120_000);
    await w.run({ kind: 'purge', queue }, 120_000);
  }
  for (let round = 1; round <= ROUNDS; round++) {
    for (const measure of MEASURES) {
      const order = round % 2 === 1 ? SYSTEMS : [...SYSTEMS].reverse();
      for (const system of order) {
        const w = workers.get(system)!;
        const queue = `q${++seq}`;
        if (measure === 'backlog') await w.run({ kind: 'preload', queue, jobs: BACKLOG }, 300_000);
        const la = loadavg()
          .map((x) => x.toFixed(2))
          .join(' ');
        say(`round ${round} ${measure} ${system} (load ${la})`);
        const a = await mark(admin, server.pid!, w.cp.pid!);
        // Backends that come and go within the measure (graphile-worker's runner opens a pool per
        // run) are seen by sampling: each counts up to its last sample.
        const seen = new Map(a.backends);
        const sampler = setInterval(() => {
          for (const [pid, sec] of backendCpu()) seen.set(pid, sec);
        }, 100);
        const r = await w
          .run<MeasureResult>(measureOf(measure, queue), 400_000)
          .finally(() => clearInterval(sampler));
        const b = await mark(admin, server.pid!, w.cp.pid!);
        for (const [pid, sec] of b.backends) seen.set(pid, sec);
        b.backends = seen;
        rows.push(perJob(system, measure, round, a, b, r, la));
        await w.run({ kind: 'purge', queue }, 300_000);
      }
    }
  }
  for (const w of workers.values()) await w.stop();
  await stop(server, 15_000);
  await admin.query(`drop database if exists ${DB} with (force)`);
  await admin.end();
  rmSync(COUNTS, { recursive: true, force: true });
  report(rows);
}

function report(rows: Row[]): void {
  const tables: Table[] = [];
  const statementNotes: string[] = [];
  for (const measure of MEASURES) {
    const latency = measure === 'latency';
    const t: Table = {
      title:
        measure === 'batch'
          ? 'Enqueue, 100 jobs per call, 8 senders'
          : measure === 'backlog'
            ? `Draining ${fmtNum(BACKLOG)} jobs, ${WORKERS} workers`
            : `Enqueue → start, ${RATE} jobs/s, ${WORKERS} idle workers`,
      columns: [
        'system',
        'round',
        'loadavg (1/5/15)',
        latency ? 'p50 / p99 ms' : 'jobs/s',
        'server CPU µs/job',
        'load CPU µs/job',
        'PG CPU µs/job',
        'statements/job',
        'transactions/job',
      ],
      rows: [],
      notes: [],
    };
    for (const r of rows.filter((x) => x.measure === measure)) {
      t.rows.push([
        r.system,
        String(r.round),
        r.load,
        latency
          ? `${fmtMs(r.result.p50 ?? Number.NaN)} / ${fmtMs(r.result.p99 ?? Number.NaN)}`
          : fmtNum(r.result.rate),
        fmtNum(r.serverUs),
        fmtNum(r.loadUs),
        fmtNum(r.pgUs),
        r.statements.toFixed(2),
        r.xacts.toFixed(2),
      ]);
      if (r.round === 1)
        statementNotes.push(
          `${measure}, ${r.system}: ${r.top.map(([k, n]) => `${(n / r.jobs).toFixed(3)} × \`${k.slice(0, 70)}\``).join('; ')}`,
        );
    }
    tables.push(t);
  }
  for (const t of tables) say(textTable(t));
  say(statementNotes.join('\n'));
  process.stdout.write(
    `${[...tables.map(markdownTable), 'Statements per job (round 1):', '', ...statementNotes.map((n) => `- ${n}`)].join('\n\n')}\n`,
  );
  if (v['cpu-prof']) {
    const dir = v['cpu-prof'];
    for (const f of readdirSync(dir)) say(summarizeProfile(`${dir}/${f}`, 30));
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`${(err as Error).stack}\n`);
    process.exit(1);
  },
);
