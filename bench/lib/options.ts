// The bench's command line: its flags, the help text, and the options they give (scenario sizes,
// peers, ports, which tree of commitfeed runs).
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import type { Options } from './context.ts';

const HELP = `npm run bench -- [flags]

  --quick                 smoke run, under 2 minutes (short runs, smaller scales)
  --scenarios 1,...,7     which scenarios to run (default all)
  --peers LIST            peers to measure: naive,naive-nonotify,http-ceiling,floor,floor-commit,
                          raw-fanout,nats,redis (default all)
  --duration S            seconds per throughput point in scenarios 1 and 2 (default 10; quick 1)
  --conns LIST            scenario 1 connections (default 1,16,64,256)
  --warmup-curve S        scenario 1 first loads the fresh commitfeed at 64 connections for S seconds
                          and reports events/s per second: first 10 s against the last 10 s (default off)
  --batch-sizes LIST      scenario 2 batch sizes (default 100,1000)
  --batch-conns LIST      scenario 2 connections (default 4,16; quick 4)
  --latency-rate N        scenario 3 events/s (default 1000)
  --latency-streams N     scenario 3 streams (default 10)
  --latency-subs N        scenario 3 subscribers (default 100)
  --latency-duration S    scenario 3 seconds per system (default 10; quick 3)
  --latency-rounds N      scenario 3 rounds per system, systems alternating; each system's best
                          p50 and p99 are compared (default 1)
  --fanout-conns N        scenario 4 SSE connections (default 10000; quick 1000)
  --fanout-streams N      scenario 4 streams shared by the connections (default 10)
  --fanout-rate N         scenario 4 events/s (default 100)
  --fanout-duration S     scenario 4 seconds of publishing (default 10; quick 3)
  --mercure-subs N        scenario 7 SSE subscribers per API (default 1000; quick 200)
  --mercure-rate N        scenario 7 fan-out updates/s (default 200)
  --catchup-events N      scenario 5 preloaded events (default 1000000; quick 100000)
  --preload http|sql      scenario 5 preload through the API (default) or straight SQL
  --catchup-timeout S     scenario 5 gives up catching up after S seconds (default 180; quick 60)
  --no-analyze            scenario 5: do not ANALYZE after the preload (as with autovacuum off)
  --stall-ms MS           scenario 6 held-transaction time (default 2000)
  --db NAME               database, dropped and created afresh (default commitfeed_bench)
  --port N                commitfeed port (default 3210); the naive peer uses --naive-port (3211),
                          scenario 4's raw broadcaster --raw-port (3212), the floor peer
                          --floor-port (default: the raw port + 1), the durable floor the floor
                          port + 1
  --server-env K=V,...    extra environment for the commitfeed server (e.g. POOL_SIZE=20)
  --server-dir DIR        run commitfeed from DIR instead of this working tree
  --server-commit REF     run commitfeed as committed at REF (exported to a temp dir), so edits
                          in progress in the working tree cannot change it mid-run
  --cpu-prof              run commitfeed under --cpu-prof and summarise where its CPU went
  --no-write              print tables only; leave RESULTS.md and the plot alone
`;

/** `K=V` pairs separated by `sep` (--server-env): each value runs to the next separator, `=` included
 * (`NODE_OPTIONS=--import=./x.mjs`). */
export function parseEnvList(list: string, sep: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const kv of list.split(sep).filter(Boolean)) {
    const i = kv.indexOf('=');
    if (i < 1) throw new Error(`not K=V: ${kv}`);
    env[kv.slice(0, i)] = kv.slice(i + 1);
  }
  return env;
}

export function parseOptions(argv: string[]): Options {
  const { values: v } = parseArgs({
    args: argv,
    options: {
      help: { type: 'boolean' },
      quick: { type: 'boolean' },
      scenarios: { type: 'string' },
      peers: { type: 'string' },
      duration: { type: 'string' },
      conns: { type: 'string' },
      'warmup-curve': { type: 'string' },
      'batch-sizes': { type: 'string' },
      'batch-conns': { type: 'string' },
      'latency-rate': { type: 'string' },
      'latency-streams': { type: 'string' },
      'latency-subs': { type: 'string' },
      'latency-duration': { type: 'string' },
      'latency-rounds': { type: 'string' },
      'fanout-conns': { type: 'string' },
      'fanout-streams': { type: 'string' },
      'fanout-rate': { type: 'string' },
      'fanout-duration': { type: 'string' },
      'mercure-subs': { type: 'string' },
      'mercure-rate': { type: 'string' },
      'catchup-events': { type: 'string' },
      preload: { type: 'string' },
      'catchup-timeout': { type: 'string' },
      'no-analyze': { type: 'boolean' },
      'stall-ms': { type: 'string' },
      db: { type: 'string' },
      port: { type: 'string' },
      'naive-port': { type: 'string' },
      'raw-port': { type: 'string' },
      'floor-port': { type: 'string' },
      'server-env': { type: 'string' },
      'server-dir': { type: 'string' },
      'server-commit': { type: 'string' },
      'cpu-prof': { type: 'boolean' },
      'no-write': { type: 'boolean' },
    },
  });
  if (v.help) {
    process.stdout.write(HELP);
    process.exit(0);
  }
  const q = v.quick ?? false;
  const num = (s: string | undefined, full: number, quick = full) => {
    if (s === undefined) return q ? quick : full;
    const n = Number(s);
    if (!Number.isFinite(n) || n <= 0) throw new Error(`not a positive number: ${s}`);
    return n;
  };
  const list = (s: string | undefined, full: number[], quick = full) =>
    s === undefined ? (q ? quick : full) : s.split(',').map((x) => num(x, 0));
  const preload = v.preload ?? 'http';
  if (preload !== 'http' && preload !== 'sql') throw new Error('--preload is http or sql');
  const serverEnv = parseEnvList(v['server-env'] ?? '', ',');
  const db = v.db ?? 'commitfeed_bench';
  if (!/^[a-z_][a-z0-9_]*$/.test(db)) throw new Error('--db must be a plain lower-case identifier');
  return {
    quick: q,
    scenarios: list(v.scenarios, [1, 2, 3, 4, 5, 6, 7]),
    peers: (v.peers ?? 'naive,naive-nonotify,http-ceiling,floor,floor-commit,raw-fanout,nats,redis')
      .split(',')
      .filter(Boolean),
    durationSec: num(v.duration, 10, 1),
    warmupSec: q ? 0.5 : 2,
    conns: list(v.conns, [1, 16, 64, 256]),
    warmupCurveSec: v['warmup-curve'] === undefined ? 0 : num(v['warmup-curve'], 0),
    batchSizes: list(v['batch-sizes'], [100, 1000]),
    batchConns: list(v['batch-conns'], [4, 16], [4]),
    latencyRate: num(v['latency-rate'], 1000),
    latencyStreams: num(v['latency-streams'], 10),
    latencySubs: num(v['latency-subs'], 100),
    latencyDurationSec: num(v['latency-duration'], 10, 3),
    latencyRounds: num(v['latency-rounds'], 1),
    fanoutConns: num(v['fanout-conns'], 10_000, 1000),
    fanoutStreams: num(v['fanout-streams'], 10),
    fanoutRate: num(v['fanout-rate'], 100),
    fanoutDurationSec: num(v['fanout-duration'], 10, 3),
    mercureSubs: num(v['mercure-subs'], 1000, 200),
    mercureRate: num(v['mercure-rate'], 200),
    catchupEvents: num(v['catchup-events'], 1_000_000, 100_000),
    preload,
    catchupTimeoutSec: num(v['catchup-timeout'], 180, 60),
    analyzeAfterPreload: !(v['no-analyze'] ?? false),
    stallMs: num(v['stall-ms'], 2000),
    db,
    port: num(v.port, 3210),
    naivePort: num(v['naive-port'], 3211),
    rawPort: num(v['raw-port'], 3212),
    floorPort: num(v['floor-port'], num(v['raw-port'], 3212) + 1),
    cpuProf: v['cpu-prof'] ?? false,
    serverEnv,
    serverDir: v['server-commit'] ? exportCommit(v['server-commit']) : resolve(v['server-dir'] ?? '.'),
    write: !(v['no-write'] ?? false),
  };
}

/** Exports the tree of `ref` to a temporary directory that shares this one's node_modules. */
function exportCommit(ref: string): string {
  const sha = execFileSync('git', ['rev-parse', '--verify', `${ref}^{commit}`], { encoding: 'utf8' }).trim();
  const dir = join(tmpdir(), `commitfeed-bench-${sha.slice(0, 12)}`);
  if (!existsSync(join(dir, '.bench-commit'))) {
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    execFileSync('bash', ['-c', `git archive "$0" | tar -x -C "$1"`, sha, dir]);
    writeFileSync(join(dir, '.bench-commit'), `${sha.slice(0, 12)}\n`);
  }
  // Always this tree's: an export made from another checkout (a worktree since removed) keeps a
  // link that may no longer resolve.
  rmSync(join(dir, 'node_modules'), { force: true });
  symlinkSync(resolve('node_modules'), join(dir, 'node_modules'));
  return dir;
}
