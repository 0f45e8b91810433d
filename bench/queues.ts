// The queue anchor bench: commitfeed (over HTTP, and through its library/SQL API) beside pg-boss and
// graphile-worker (through their own Node APIs) on one PostgreSQL, in one run. Measures:
//   enqueue throughput, 1 job per call (32 senders) and 100 per call (8 senders);
//   claim + ack throughput with 1, 8 and 32 workers on shallow and deep backlogs;
//   enqueue → claim latency with 1, 8 and 32 workers waiting (jobs one at a time at a steady rate).
// One table per measure, with CPU columns (cores: the load process, commitfeed's server, PostgreSQL).
//
//   npm run bench:queues [-- --quick] [-- --systems commitfeed-http,pg-boss] [-- --latency-rate 20]
// Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust); the database commitfeed_qbench is
// dropped and created. Each system's client runs in a process of its own (bench/workers/queue-load.ts);
// commitfeed's server is started from this working tree. Every measure's jobs are deleted after it
// and the table vacuumed (each system through its own means), so each measure starts on tables of
// equal size: rows left behind by earlier measures, live or dead (this PostgreSQL runs without
// autovacuum), slow the systems with one shared jobs table and not pg-boss, which has a partition
// per queue.
import { parseArgs } from 'node:util';
import pg from 'pg';
import { benchFile } from './lib/context.ts';
import { spawnNode, stop, waitForHttp, Worker } from './lib/proc.ts';
import { fmtMs, fmtNum, markdownTable, type Table, textTable } from './lib/report.ts';
import { coresUsed, cpuMark, machineBusyCores, machineFacts, setBenchDatabase } from './lib/sys.ts';
import type { LoadArgs, Measure, MeasureResult, System } from './workers/queue-load.ts';

const { values: v } = parseArgs({
  options: {
    quick: { type: 'boolean' },
    systems: { type: 'string' },
    db: { type: 'string' },
    port: { type: 'string' },
    'latency-rate': { type: 'string' },
  },
});
const quick = v.quick ?? false;
const SYSTEMS = (v.systems ?? 'commitfeed-http,commitfeed-sql,pg-boss,graphile-worker').split(
  ',',
) as System[];
const DB = v.db ?? 'commitfeed_qbench';
const PORT = Number(v.port ?? 3230);
const ADMIN = 'postgres://postgres@127.0.0.1:5432/postgres';
const URL = `postgres://postgres@127.0.0.1:5432/${DB}`;
const POOL = 10;
const ENQUEUE_SEC = quick ? 2 : 10;
const BACKLOGS = quick ? [500, 2000] : [2000, 20_000];
const WORKERS = [1, 8, 32];
const LAT_JOBS = quick ? 60 : 300;
/** Well below every system's single-enqueue rate on a loaded 2-core machine, so no backlog forms. */
const LAT_RATE = Number(v['latency-rate'] ?? 20);
const say = (m: string) => process.stderr.write(`${m}\n`);

const GUARANTEES: Record<System, string> = {
  'commitfeed-http':
    'at-least-once; fenced leases (ack/nack/extend need the claim token); enqueue visible and claimers woken at commit; dead letters',
  'commitfeed-sql':
    'the same tables and statements as over HTTP, in the caller’s own transaction; no long-poll wake-ups outside the server',
  'pg-boss':
    'at-least-once; jobs fetched with SKIP LOCKED and expired by a supervisor; no fencing token (a late worker can complete a job re-fetched by another)',
  'graphile-worker':
    'at-least-once; LISTEN/NOTIFY wake-ups; locked_by worker id and lock timeout (4 h) rather than a per-claim token; named queues run serially',
};

async function freshDatabase(): Promise<string> {
  const admin = new pg.Client({ connectionString: ADMIN });
  await admin.connect();
  try {
    await admin.query(`drop database if exists ${DB} with (force)`);
    await admin.query(`create database ${DB}`);
    const { rows } = await admin.query<{ server_version: string }>('show server_version');
    return rows[0].server_version;
  } finally {
    await admin.end();
  }
}

type WithoutQueue<T> = T extends unknown ? Omit<T, 'queue'> : never;

interface Cell {
  result: MeasureResult;
  cores: { load: number; server: number; postgres: number };
}

async function main(): Promise<void> {
  const pgVersion = await freshDatabase();
  setBenchDatabase(DB);
  const busy = await machineBusyCores(1000);
  say(`machine: ${busy.toFixed(2)} cores busy before the run`);
  const server = spawnNode('src/main.ts', [], {
    env: {
      DATABASE_URL: URL,
      PORT: String(PORT),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
      POOL_SIZE: String(POOL),
      JANITOR_INTERVAL: '0',
      AUTH: 'off',
    },
    logFile: benchFile('.logs/queues-server.log'),
  });
  const base = `http://127.0.0.1:${PORT}`;
  await waitForHttp(`${base}/healthz`, server, 60_000);

  const workers = new Map<System, Worker<never>>();
  for (const system of SYSTEMS) {
    const args: LoadArgs = { system, databaseUrl: URL, baseUrl: base, poolSize: POOL };
    workers.set(system, new Worker<never>(system, benchFile('workers/queue-load.ts'), args));
  }
  let seq = 0;
  const run = async (system: System, m: WithoutQueue<Measure>, timeoutMs = 300_000): Promise<Cell> => {
    const w = workers.get(system)!;
    const queue = `b${++seq}`;
    const a = cpuMark(server.pid, [w.cp.pid!]);
    const result = await w.run<MeasureResult>({ ...m, queue }, timeoutMs);
    const b = cpuMark(server.pid, [w.cp.pid!]);
    const c = coresUsed(a, b);
    await w.run({ kind: 'purge', queue }, timeoutMs);
    return {
      result,
      cores: { load: c.extra, server: system === 'commitfeed-http' ? c.server : 0, postgres: c.postgres },
    };
  };
  const cpu = (c: Cell) =>
    [
      c.cores.load.toFixed(2),
      c.cores.server ? c.cores.server.toFixed(2) : '–',
      c.cores.postgres.toFixed(2),
    ] as const;
  const tables: Table[] = [];

  // Warm-up (not measured): each system's first calls pay connection set-up, prepared statements,
  // JIT and route compilation.
  for (const system of SYSTEMS) {
    say(`warm-up ${system}`);
    await run(system, { kind: 'enqueue', senders: 32, batch: 1, seconds: quick ? 1 : 3 });
    await run(system, { kind: 'enqueue', senders: 8, batch: 100, seconds: 1 });
  }

  // 1. Enqueue throughput.
  const enq: Table = {
    title: 'Enqueue throughput (jobs/s)',
    columns: ['system', 'calls', 'jobs/s', 'load cores', 'server cores', 'PG cores'],
    rows: [],
    notes: [`${ENQUEUE_SEC} s per point; 1 job per call with 32 senders, 100 per call with 8 senders`],
  };
  for (const [batch, senders] of [
    [1, 32],
    [100, 8],
  ]) {
    for (const system of SYSTEMS) {
      say(`enqueue ${system}: ${batch} per call, ${senders} senders`);
      const c = await run(system, { kind: 'enqueue', senders, batch, seconds: ENQUEUE_SEC });
      enq.rows.push([system, `${batch} × ${senders}`, fmtNum(c.result.rate), ...cpu(c)]);
    }
  }
  tables.push(enq);
  say(textTable(enq));

  // 2. Claim + ack throughput.
  const proc: Table = {
    title: 'Claim + ack throughput (jobs/s)',
    columns: ['system', 'backlog', 'workers', 'jobs/s', 'load cores', 'server cores', 'PG cores'],
    rows: [],
    notes: [
      'the backlog is enqueued first (batches of 1,000), then the workers drain it, timed from the first job handled to the last (start-up and wind-down left out): commitfeed claim (max 10) + batch ack loops; pg-boss fetch (batchSize 10) + complete loops; graphile-worker one runner with `concurrency` = workers, one job per worker at a time',
    ],
  };
  for (const backlog of BACKLOGS) {
    for (const n of WORKERS) {
      for (const system of SYSTEMS) {
        const w = workers.get(system)!;
        const queue = `b${++seq}`;
        await w.run({ kind: 'preload', queue, jobs: backlog }, 300_000);
        say(`process ${system}: backlog ${backlog}, ${n} workers`);
        const a = cpuMark(server.pid, [w.cp.pid!]);
        const result = await w.run<MeasureResult>(
          { kind: 'process', queue, workers: n, jobs: backlog, timeoutSec: quick ? 60 : 180 },
          400_000,
        );
        const c = coresUsed(a, cpuMark(server.pid, [w.cp.pid!]));
        await w.run({ kind: 'purge', queue }, 300_000);
        const cell: Cell = {
          result,
          cores: { load: c.extra, server: system === 'commitfeed-http' ? c.server : 0, postgres: c.postgres },
        };
        proc.rows.push([
          system,
          fmtNum(backlog),
          String(n),
          `${fmtNum(result.rate)}${result.note ? ` (${result.note})` : ''}`,
          ...cpu(cell),
        ]);
      }
    }
  }
  tables.push(proc);
  say(textTable(proc));

  // 3. Enqueue → claim latency.
  const lat: Table = {
    title: 'Enqueue → claim latency (ms)',
    columns: [
      'system',
      'waiting workers',
      'p50',
      'p99',
      'jobs seen',
      'load cores',
      'server cores',
      'PG cores',
    ],
    rows: [],
    notes: [
      `${LAT_JOBS} jobs, one per call at ${LAT_RATE}/s, to workers already waiting; from just before the enqueue call to the handler (same process clock)`,
      'commitfeed-sql has no wake-up outside the server: its workers re-claim every 5 ms when empty',
      'pg-boss 10 polls (pollingIntervalSeconds 0.5, its minimum): latency is half the interval on average',
    ],
  };
  for (const n of WORKERS) {
    for (const system of SYSTEMS) {
      say(`latency ${system}: ${n} waiting workers`);
      const c = await run(system, { kind: 'latency', workers: n, jobs: LAT_JOBS, rate: LAT_RATE });
      lat.rows.push([
        system,
        String(n),
        fmtMs(c.result.p50 ?? Number.NaN),
        fmtMs(c.result.p99 ?? Number.NaN),
        `${c.result.done}/${LAT_JOBS}`,
        ...cpu(c),
      ]);
    }
  }
  tables.push(lat);
  say(textTable(lat));

  for (const w of workers.values()) await w.stop();
  await stop(server);

  const facts = machineFacts();
  const md = [
    `## Queues beside pg-boss and graphile-worker${quick ? ' (quick)' : ''} — ${new Date().toISOString().slice(0, 16)}Z`,
    '',
    `Command: \`npm run bench:queues${quick ? ' -- --quick' : ''}\`. PostgreSQL ${pgVersion} on 127.0.0.1:5432, ${facts.cores} cores (${facts.cpu}), Node ${facts.node}; ${busy.toFixed(2)} cores busy before the run. Versions: pg-boss 10.4.2 and graphile-worker 0.17.3 (the newest whose engines accept Node 20: pg-boss 11 and graphile-worker 0.18 need Node 22). Pools of ${POOL} connections (graphile-worker: max(10, workers + 2)). "server cores" is commitfeed's server process (HTTP rows only); "load cores" the client process; "PG cores" this database's backends.`,
    '',
    ...tables.flatMap((t) => [markdownTable(t), '']),
    'What each system guarantees:',
    '',
    ...SYSTEMS.map((s) => `- **${s}**: ${GUARANTEES[s]}`),
    '',
  ].join('\n');
  process.stdout.write(`${md}\n`);
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`${(err as Error).stack}\n`);
    process.exit(1);
  },
);
