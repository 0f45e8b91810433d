// commitfeed benchmark suite: `npm run bench [-- flags]`, `npm run bench -- --help` for the flags.
// Starts commitfeed and a naive peer server against a fresh database, measures them beside NATS
// JetStream and Redis Streams, prints one table per scenario, and writes bench/RESULTS.md and
// bench/scenario1.svg. Every process it starts is stopped when it ends, however it ends.
import { type ChildProcess, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { benchFile, type Ctx, log, type Options, type Server } from './lib/context.ts';
import { parseOptions } from './lib/options.ts';
import { dropNats, dropRedis, type PeerStatus, prepareNats, prepareRedis, startFloor } from './lib/peers.ts';
import { spawnNode, stop, waitForHttp } from './lib/proc.ts';
import { summarizeProfile } from './lib/profile.ts';
import { markdownTable, plotSvg, textTable } from './lib/report.ts';
import { machineBusyCores, machineFacts, setBenchDatabase } from './lib/sys.ts';
import { scenario5 } from './scenarios/catchup.ts';
import { scenario4, scenario6 } from './scenarios/delivery.ts';
import { scenario3 } from './scenarios/latency.ts';
import { BENCH_MERCURE_ENV, scenario7 } from './scenarios/mercure.ts';
import { scenario1, scenario2 } from './scenarios/publish.ts';

const METHOD = `How it is measured: \`bench/run.ts\` drops and creates the database, starts commitfeed (\`node --import tsx src/main.ts\`,
LOG_LEVEL=warn) and the naive peer (\`bench/peers/naive-server.ts\`) as their own processes, and drives them from other
processes: autocannon for HTTP throughput, \`bench/workers/publisher.ts\` for open-loop publishing and for NATS/Redis,
\`bench/workers/subscriber.ts\` (a raw-socket SSE client, JetStream ordered push consumers, or Redis XREAD BLOCK loops)
for delivery. Each payload carries \`t\`, CLOCK_MONOTONIC milliseconds at the moment the publish is sent, and \`s\`, a
per-stream sequence number; subscribers subtract \`t\` from their own CLOCK_MONOTONIC (one clock for every process on
the machine) and check that every \`s\` arrived exactly once, and that all subscribers of a stream saw one order.
Peers that cannot be reached are reported and skipped.`;

const ADMIN_URL = 'postgres://postgres@127.0.0.1:5432/postgres';

async function freshDatabase(db: string): Promise<{ url: string; facts: Record<string, string> }> {
  const admin = new pg.Client({ connectionString: ADMIN_URL });
  await admin.connect();
  const facts: Record<string, string> = {};
  try {
    await admin.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
    await admin.query(`CREATE DATABASE ${db}`);
    const { rows } = await admin.query<{ name: string; setting: string }>(
      `SELECT name, setting FROM pg_settings
       WHERE name IN ('server_version', 'max_connections', 'shared_buffers', 'synchronous_commit', 'fsync', 'wal_level',
                      'autovacuum', 'jit')`,
    );
    const s = Object.fromEntries(rows.map((r) => [r.name, r.setting]));
    facts['postgres'] =
      `PostgreSQL ${s['server_version']} on 127.0.0.1:5432 (synchronous_commit=${s['synchronous_commit']}, fsync=${s['fsync']}, autovacuum=${s['autovacuum']}, jit=${s['jit']}, ` +
      `shared_buffers=${(Number(s['shared_buffers']) * 8) / 1024} MB, max_connections=${s['max_connections']})`;
  } finally {
    await admin.end();
  }
  const url = `postgres://postgres@127.0.0.1:5432/${db}`;
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    // The DB-ceiling table of scenario 2: the same columns as commitfeed.feed.
    await c.query(`
      CREATE SCHEMA bench_ceiling;
      CREATE TABLE bench_ceiling.feed (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        txid xid8 NOT NULL DEFAULT pg_current_xact_id(),
        stream text NOT NULL,
        type text NOT NULL,
        key text,
        data json NOT NULL,
        created_at timestamptz NOT NULL DEFAULT clock_timestamp()
      );
      CREATE INDEX ON bench_ceiling.feed (txid, id);
      CREATE INDEX ON bench_ceiling.feed (stream, txid, id);`);
  } finally {
    await c.end();
  }
  return { url, facts };
}

const PROF_DIR = benchFile('.prof');
const LOG_DIR = benchFile('.logs');

async function startCommitfeed(opts: Options, dbUrl: string): Promise<Server> {
  const log = join(LOG_DIR, 'commitfeed.log');
  const cp = spawnNode('src/main.ts', [], {
    cwd: opts.serverDir,
    env: {
      PORT: String(opts.port),
      HOST: '127.0.0.1',
      DATABASE_URL: dbUrl,
      LOG_LEVEL: 'warn',
      // The Mercure hub is on in every run (scenario 7 measures it beside the native API).
      ...BENCH_MERCURE_ENV,
      ...opts.serverEnv,
    },
    logFile: log,
    nodeFlags: opts.cpuProf ? ['--cpu-prof', `--cpu-prof-dir=${PROF_DIR}`] : [],
  });
  await waitForHttp(`http://127.0.0.1:${opts.port}/readyz`, cp, 60_000);
  // WORKERS=N: /readyz answers as soon as one worker listens; the others may still be starting (and
  // burning CPU) for many seconds on a busy machine. Measure only once every worker reports.
  const workers = Number(opts.serverEnv.WORKERS ?? 1);
  if (workers > 1) await waitForWorkers(opts.port, workers, cp, 120_000);
  return { name: 'commitfeed', port: opts.port, cp, log };
}

async function waitForWorkers(port: number, n: number, cp: ChildProcess, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (cp.exitCode !== null || cp.signalCode !== null)
      throw new Error('commitfeed exited while its workers started');
    const text = await fetch(`http://127.0.0.1:${port}/metrics`).then(
      (r) => r.text(),
      () => '',
    );
    if (new RegExp(`^commitfeed_workers\\{state="reporting"\\} ${n}$`, 'm').test(text)) return;
    await new Promise((r) => setTimeout(r, 500));
  }
  throw new Error(`not every one of the ${n} workers reported within ${timeoutMs / 1000} s`);
}

async function startNaive(opts: Options, dbUrl: string): Promise<Server> {
  const log = join(LOG_DIR, 'naive.log');
  const cp = spawnNode(benchFile('peers/naive-server.ts'), [], {
    env: { PORT: String(opts.naivePort), DATABASE_URL: dbUrl },
    logFile: log,
  });
  await waitForHttp(`http://127.0.0.1:${opts.naivePort}/readyz`, cp, 30_000);
  return { name: 'naive', port: opts.naivePort, cp, log };
}

function gitDescribe(dir: string): string {
  try {
    const marker = join(dir, '.bench-commit');
    if (existsSync(marker)) return `${readFileSync(marker, 'utf8').trim()} (exported, clean)`;
    return execFileSync('git', ['-C', dir, 'describe', '--always', '--dirty'], { encoding: 'utf8' }).trim();
  } catch {
    return 'unknown';
  }
}

function tailOf(file: string, lines = 15): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const opts = parseOptions(argv);
  const command = `npm run bench${argv.length ? ` -- ${argv.join(' ')}` : ''}`;
  const started = new Date();
  const t0 = performance.now();
  mkdirSync(LOG_DIR, { recursive: true });
  if (opts.cpuProf) rmSync(PROF_DIR, { recursive: true, force: true });
  log(
    `commitfeed bench: scenarios ${opts.scenarios.join(',')}${opts.quick ? ' (quick)' : ''}; logs in bench/.logs/`,
  );

  const facts = machineFacts();
  const busy = await machineBusyCores(1000);
  facts['load before the run'] = `${busy.toFixed(2)} cores busy (1 s sample)`;
  if (busy > 0.2)
    log(`WARNING: the machine is already busy (${busy.toFixed(2)} cores) before the bench starts`);
  const db = await freshDatabase(opts.db);
  setBenchDatabase(opts.db);
  Object.assign(facts, db.facts);
  const wants = (p: string) => opts.peers.includes(p);
  const [nats, redis]: PeerStatus[] = await Promise.all([
    wants('nats') ? prepareNats() : Promise.resolve({ ok: false, reason: 'not selected (--peers)' }),
    wants('redis') ? prepareRedis() : Promise.resolve({ ok: false, reason: 'not selected (--peers)' }),
  ]);
  facts['nats'] = nats.ok ? nats.version! : `unavailable: ${nats.reason}`;
  facts['redis'] = redis.ok ? redis.version! : `unavailable: ${redis.reason}`;
  for (const [name, st] of [
    ['NATS', nats],
    ['Redis', redis],
  ] as const)
    if (!st.ok && st.reason !== 'not selected (--peers)') log(`PEER SKIPPED: ${name}: ${st.reason}`);
  facts['commitfeed'] = `git ${gitDescribe(opts.serverDir)}`;

  const ctx: Ctx = {
    opts,
    dbUrl: db.url,
    commitfeed: undefined,
    naive: undefined,
    floor: undefined,
    floorCommit: undefined,
    nats,
    redis,
    tables: [],
    checks: [],
    plot: [],
    problems: [],
    restartCommitfeed: async (scenario) => {
      if (ctx.commitfeed) await stop(ctx.commitfeed.cp, 10_000);
      ctx.commitfeed = undefined;
      return ctx.ensureCommitfeed(scenario);
    },
    ensureCommitfeed: async (scenario) => {
      const cur = ctx.commitfeed;
      if (cur && cur.cp.exitCode === null && cur.cp.signalCode === null) return true;
      if (cur) {
        const msg = `commitfeed exited (${cur.cp.exitCode ?? cur.cp.signalCode}) before scenario ${scenario}; last log lines:\n${tailOf(cur.log)}`;
        ctx.problems.push(msg);
        log(msg);
      }
      if (!existsSync(join(opts.serverDir, 'src/main.ts'))) return false;
      try {
        ctx.commitfeed = await startCommitfeed(opts, db.url);
        return true;
      } catch (err) {
        ctx.commitfeed = undefined;
        log(
          `commitfeed did not start: ${(err as Error).message}\n${tailOf(join(LOG_DIR, 'commitfeed.log'))}`,
        );
        ctx.problems.push(`commitfeed did not start: ${(err as Error).message}`);
        return false;
      }
    },
  };

  try {
    if (!existsSync(join(opts.serverDir, 'src/main.ts')))
      log(`${opts.serverDir}/src/main.ts not found: commitfeed is skipped, peers only`);
    else if (await ctx.ensureCommitfeed(0))
      log(`commitfeed ready on 127.0.0.1:${opts.port} (pid ${ctx.commitfeed!.cp.pid})`);
    if (wants('naive') || wants('naive-nonotify') || wants('http-ceiling')) {
      ctx.naive = await startNaive(opts, db.url);
      log(`naive peer ready on 127.0.0.1:${opts.naivePort}`);
    }
    if (wants('floor') && opts.scenarios.some((n) => n === 1 || n === 3)) {
      ctx.floor = await startFloor(opts.floorPort, LOG_DIR);
      log(`floor peer ready on 127.0.0.1:${opts.floorPort}`);
    }
    if (wants('floor-commit') && opts.scenarios.includes(3)) {
      ctx.floorCommit = await startFloor(opts.floorPort + 1, LOG_DIR, db.url);
      log(`durable floor peer ready on 127.0.0.1:${opts.floorPort + 1}`);
    }
    const scenarios: Record<number, (c: Ctx) => Promise<void>> = {
      1: scenario1,
      2: scenario2,
      3: scenario3,
      4: scenario4,
      5: scenario5,
      6: scenario6,
      7: scenario7,
    };
    for (const n of opts.scenarios) {
      const run = scenarios[n];
      if (!run) throw new Error(`no scenario ${n}`);
      const before = ctx.tables.length;
      try {
        await run(ctx);
      } catch (err) {
        ctx.problems.push(`scenario ${n} aborted: ${(err as Error).stack}`);
        log(`scenario ${n} aborted: ${(err as Error).message}`);
      }
      for (const t of ctx.tables.slice(before)) process.stdout.write(`\n${textTable(t)}\n\n`);
    }
  } finally {
    if (ctx.commitfeed) await stop(ctx.commitfeed.cp, 10_000);
    if (ctx.naive) await stop(ctx.naive.cp);
    if (ctx.floor) await stop(ctx.floor.cp);
    if (ctx.floorCommit) await stop(ctx.floorCommit.cp);
    await Promise.all([nats.ok ? dropNats() : undefined, redis.ok ? dropRedis() : undefined]);
  }

  let profile = '';
  if (opts.cpuProf) {
    const files = existsSync(PROF_DIR)
      ? readdirSync(PROF_DIR)
          .filter((f) => f.endsWith('.cpuprofile'))
          .map((f) => join(PROF_DIR, f))
          // The tsx loader thread writes its own small profile; the server's main thread is the big one.
          .sort((a, b) => statSync(b).size - statSync(a).size)
      : [];
    if (files[0]) {
      profile = summarizeProfile(files[0]);
      process.stdout.write(`\n${profile}\n`);
    } else log('no .cpuprofile was written (did the server exit cleanly on SIGTERM?)');
  }

  const checks = ctx.checks.map((c) => [
    String(c.scenario),
    c.what,
    c.target,
    c.got,
    c.pass === undefined ? 'not measured' : c.pass ? 'met' : 'NOT MET',
  ]);
  const checkTable = {
    title: 'Targets',
    columns: ['#', 'what', 'target', 'measured', 'verdict'],
    rows: checks,
    notes: [],
  };
  process.stdout.write(`\n${textTable(checkTable)}\n`);
  if (ctx.problems.length)
    process.stdout.write(`\nProblems seen:\n${ctx.problems.map((p) => `  - ${p}`).join('\n')}\n`);
  const minutes = (performance.now() - t0) / 60_000;
  log(`done in ${minutes.toFixed(1)} min`);
  if (!opts.write) return;

  const svgName = 'scenario1.svg';
  if (ctx.plot.some((s) => s.throughput.length > 0))
    writeFileSync(benchFile(svgName), plotSvg('Scenario 1: single-event publish', ctx.plot, opts.conns));
  const resultsPath = benchFile('RESULTS.md');
  const marker = '<!-- notes below this line are kept when the bench rewrites this file -->';
  let kept = `${marker}\n`;
  if (existsSync(resultsPath)) {
    const old = readFileSync(resultsPath, 'utf8');
    const i = old.indexOf(marker);
    if (i >= 0) kept = old.slice(i);
  }
  const md = [
    '# commitfeed benchmark results',
    '',
    `Run ${started.toISOString().slice(0, 16).replace('T', ' ')} UTC, ${minutes.toFixed(1)} min, with:`,
    '',
    '```',
    command,
    '```',
    '',
    'Runs since this one (single scenarios with `--no-write`, the experiments): [Latest results](#latest-results), ' +
      'below. Every run recorded: [HISTORY.md](HISTORY.md).',
    '',
    '| machine | |',
    '| --- | --- |',
    ...Object.entries(facts).map(([k, v]) => `| ${k} | ${v.replace(/\|/g, '\\|')} |`),
    '',
    'Everything runs on this one machine: the server under test, PostgreSQL, NATS, Redis, the load generator and the ' +
      'subscribers share its cores, so every number here is also a statement about that contention (see the CPU columns).',
    '',
    '## Targets',
    '',
    markdownTable(checkTable).replace(/^### .*\n\n/, ''),
    '',
    ...(ctx.problems.length
      ? ['## Problems seen in this run', '', ...ctx.problems.map((p) => `- ${p.replace(/\n/g, ' ')}`), '']
      : []),
    '## Scenarios',
    '',
    METHOD,
    '',
    ...ctx.tables.flatMap((t) => [
      markdownTable(t),
      '',
      ...(t.title.startsWith('Scenario 1') && existsSync(benchFile(svgName))
        ? [`![scenario 1](${svgName})`, '']
        : []),
    ]),
    ...(profile ? ['## Where the server CPU went (--cpu-prof)', '', '```', profile, '```', ''] : []),
    kept,
  ].join('\n');
  writeFileSync(resultsPath, md);
  log(`wrote bench/RESULTS.md${ctx.plot.length ? ` and bench/${svgName}` : ''}`);
}

main().then(
  () => process.exit(0),
  (err: Error) => {
    process.stderr.write(`bench failed: ${err.stack}\n`);
    process.exit(1);
  },
);
