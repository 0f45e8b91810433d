// Server CPU per single publish, before → after a change, beside the bare Fastify handler, in one run:
// each commitfeed tree (--dirs, e.g. `git worktree`s or exports of two commits) runs on its own fresh
// database with the bench's environment, the floor peer (bench/peers/floor-server.ts, scenario 1's
// (f)) beside them; every system is warmed, then the systems take turns (--rounds), autocannon at
// --conns for --sec seconds each, scenario 1's body. Each turn: the server's utime + stime over the
// turn ÷ the requests it answered. Alternating turns puts every system under the same spread of
// machine load; the medians are the figures to compare.
// --gc: every server also runs bench/lib/gc-stats.mjs, and each turn reports the bytes its young
// collections promoted per request and their time per request (bench/HISTORY.md, "Promoted garbage").
//
//   npx tsx bench/experiments/cpu-ab.ts --dirs /tmp/before,/tmp/after --db wt_x_ab --port 3290 --rounds 5
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { benchFile, type Server } from '../lib/context.ts';
import { parseEnvList } from '../lib/options.ts';
import { startFloor } from '../lib/peers.ts';
import { spawnNode, stop, waitForHttp, Worker } from '../lib/proc.ts';
import { cpuSeconds } from '../lib/sys.ts';
import { BENCH_MERCURE_ENV } from '../scenarios/mercure.ts';
import type { HttpLoadArgs, HttpLoadResult } from '../workers/http-load.ts';

const { values: v } = parseArgs({
  options: {
    dirs: { type: 'string', default: '.' },
    db: { type: 'string', default: 'commitfeed_bench_ab' },
    port: { type: 'string', default: '3290' },
    conns: { type: 'string', default: '64' },
    sec: { type: 'string', default: '6' },
    warm: { type: 'string', default: '8' },
    rounds: { type: 'string', default: '5' },
    'server-env': { type: 'string', default: '' },
    gc: { type: 'boolean', default: false },
  },
});
const dirs = v.dirs!.split(',');
const base = Number(v.port);
if (!/^[a-z_][a-z0-9_]*$/.test(v.db!)) throw new Error('--db: a plain identifier');
const extraEnv = parseEnvList(v['server-env']!, ',');
const body = JSON.stringify({ type: 'bench', data: { n: 1, msg: 'hello, world' } });
const logDir = benchFile('.logs');
const gcFile = (name: string) => join(logDir, `gc-stats-${name}.json`);
/** With --gc: the preload and where it writes, for the server `name`. */
const gcExtra = (name: string): { env: Record<string, string>; nodeFlags: string[] } =>
  v.gc
    ? { env: { GC_STATS_FILE: gcFile(name) }, nodeFlags: ['--import', benchFile('lib/gc-stats.mjs')] }
    : { env: {}, nodeFlags: [] };

interface GcTotals {
  seq: number;
  scavengeUs: number;
  promotedBytes: number;
}

/** Each server's gcExtra name, set where it is started. */
const gcNames = new Map<Server, string>();

/** The GC totals of a server started with gcExtra, as of now (asks it, waits for the write). */
async function gcTotals(s: Server): Promise<GcTotals> {
  const file = gcFile(gcNames.get(s)!);
  const read = (): GcTotals | undefined =>
    existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as GcTotals) : undefined;
  const before = read()?.seq ?? 0;
  process.kill(s.cp.pid!, 'SIGUSR2');
  for (let i = 0; i < 200; i++) {
    await new Promise((r) => setTimeout(r, 25));
    const now = read();
    if (now !== undefined && now.seq > before) return now;
  }
  throw new Error(`${s.name}: no GC totals from gc-stats.mjs within 5 s`);
}

async function admin(sql: string): Promise<void> {
  const c = new pg.Client({ connectionString: 'postgres://postgres@127.0.0.1:5432/postgres' });
  await c.connect();
  try {
    await c.query(sql);
  } finally {
    await c.end();
  }
}

async function startCommitfeed(dir: string, i: number): Promise<Server> {
  const db = `${v.db}_${i}`;
  await admin(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
  await admin(`CREATE DATABASE ${db}`);
  const port = base + 1 + i;
  const log = join(logDir, `cpu-ab-${i}.log`);
  const gc = gcExtra(String(i));
  const cp = spawnNode('src/main.ts', [], {
    cwd: dir,
    nodeFlags: gc.nodeFlags,
    env: {
      ...gc.env,
      PORT: String(port),
      HOST: '127.0.0.1',
      DATABASE_URL: `postgres://postgres@127.0.0.1:5432/${db}`,
      LOG_LEVEL: 'warn',
      ...BENCH_MERCURE_ENV,
      ...extraEnv,
    },
    logFile: log,
  });
  await waitForHttp(`http://127.0.0.1:${port}/readyz`, cp, 120_000);
  const server = { name: `${i}: ${dir}`, port, cp, log };
  gcNames.set(server, String(i));
  return server;
}

/** The mean group size over the server's life (its /metrics). */
async function groupSize(port: number): Promise<string> {
  const text = await fetch(`http://127.0.0.1:${port}/metrics`).then((r) => r.text());
  return Number(/^commitfeed_commit_batch_size_mean (\S+)$/m.exec(text)?.[1]).toFixed(1);
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main(): Promise<void> {
  const systems: Server[] = [await startFloor(base, logDir, undefined, gcExtra('floor'))];
  gcNames.set(systems[0], 'floor');
  systems[0].name = 'floor (bare Fastify)';
  for (const [i, dir] of dirs.entries()) systems.push(await startCommitfeed(dir, i));
  const loader = new Worker<unknown>(
    'http',
    benchFile('workers/http-load.ts'),
    {},
    { env: { BENCH_JOBS: '1' } },
  );
  const turn = async (s: Server, sec: number) => {
    const args: HttpLoadArgs = {
      url: `http://127.0.0.1:${s.port}/v1/streams/s1-publish/events`,
      body,
      connections: Number(v.conns),
      durationSec: sec,
    };
    const gcA = v.gc ? await gcTotals(s) : undefined;
    const a = cpuSeconds(s.cp.pid!);
    const r = await loader.run<HttpLoadResult>(args, sec * 1000 + 60_000);
    const b = cpuSeconds(s.cp.pid!);
    const gcB = v.gc ? await gcTotals(s) : undefined;
    if (r.non2xx + r.errors + r.timeouts > 0)
      console.log(`  ${s.name}: ${r.non2xx + r.errors + r.timeouts} failed`);
    const n = Math.max(1, r.ok + r.non2xx);
    const gc =
      gcA && gcB
        ? {
            promoted: (gcB.promotedBytes - gcA.promotedBytes) / n,
            scavengeUs: (gcB.scavengeUs - gcA.scavengeUs) / n,
          }
        : undefined;
    return { us: ((b - a) / n) * 1e6, rps: r.rps, p50: r.latency.p50, gc };
  };
  try {
    for (const s of systems) await turn(s, Number(v.warm));
    const us = systems.map(() => [] as number[]);
    const rps = systems.map(() => [] as number[]);
    const p50 = systems.map(() => [] as number[]);
    const promoted = systems.map(() => [] as number[]);
    const scavengeUs = systems.map(() => [] as number[]);
    for (let round = 0; round < Number(v.rounds); round++) {
      const load = readFileSync('/proc/loadavg', 'utf8').split(' ')[0];
      const cells: string[] = [];
      // Each round starts one system later, so that no system always follows the same one.
      for (let n = 0; n < systems.length; n++) {
        const j = (round + n) % systems.length;
        const t = await turn(systems[j], Number(v.sec));
        us[j][round] = t.us;
        if (t.gc) {
          promoted[j][round] = t.gc.promoted;
          scavengeUs[j][round] = t.gc.scavengeUs;
        }
        rps[j][round] = t.rps;
        p50[j][round] = t.p50;
      }
      for (const j of systems.keys()) cells.push(us[j][round].toFixed(1));
      console.log(`round ${round + 1} (load ${load}): µs/req ${cells.join(' / ')}`);
    }
    // Paired within each round (the same minute's load): each tree's CPU per publish ÷ the floor's,
    // and the last tree's ÷ the first tree's.
    const pair = (j: number, k: number) => us[j].map((x, r) => x / us[k][r]);
    for (const j of systems.keys()) {
      if (j === 0) continue;
      console.log(
        `${systems[j].name}: per-round ratio to the floor, median ${median(pair(j, 0)).toFixed(2)}× (${pair(
          j,
          0,
        )
          .map((x) => x.toFixed(2))
          .join(', ')})`,
      );
    }
    // Each tree against the one before it (commits in order: before → after of each change), and
    // the last against the first.
    const steps = systems.map((_, j) => [j, j - 1] as const).slice(2);
    if (systems.length > 3) steps.push([systems.length - 1, 1]);
    for (const [j, k] of steps) {
      const r = pair(j, k);
      const each = r.map((x) => x.toFixed(3)).join(', ');
      console.log(`tree ${j - 1} ÷ tree ${k - 1}, per round: median ${median(r).toFixed(3)} (${each})`);
    }
    const floor = median(us[0]);
    for (const [j, s] of systems.entries()) {
      const m = median(us[j]);
      console.log(
        `${s.name}: median ${m.toFixed(1)} µs/req (${us[j].map((x) => x.toFixed(1)).join(', ')}), ` +
          `${Math.round(median(rps[j]))} req/s, p50 ${median(p50[j])} ms, ${(m / floor).toFixed(2)}× the floor` +
          (j === 0 ? '' : `, ${await groupSize(s.port)} events per group commit`) +
          (v.gc
            ? `; young GC per request: ${Math.round(median(promoted[j]))} B promoted, ` +
              `${median(scavengeUs[j]).toFixed(2)} µs (${promoted[j].map((x) => Math.round(x)).join(', ')} B)`
            : ''),
      );
    }
  } finally {
    await loader.stop();
    for (const s of systems) await stop(s.cp);
    for (const i of dirs.keys()) await admin(`DROP DATABASE IF EXISTS ${v.db}_${i} WITH (FORCE)`);
  }
}

await main();
