// Instructions per single-event publish, load-independent: the server runs under
// `valgrind --tool=callgrind`, takes `--warm` publishes (the JIT settles), then its counters are
// zeroed, `--n` publishes are sent `--conns` at a time, and the counters are dumped: instructions
// (every thread of the server process: JavaScript, V8's compiler and GC threads, libuv, the kernel's
// share excluded) ÷ publishes. On a machine shared with other work, where CPU seconds move with the
// load (caches, frequency, preemption), this is the before → after measure of a code change.
//
//   npx tsx bench/experiments/instructions.ts --system commitfeed --db wt_bench_ir --port 3290 [--server-commit REF]
//   npx tsx bench/experiments/instructions.ts --system floor --port 3291
//
// commitfeed runs as the bench runs it (same environment, PostgreSQL at 127.0.0.1:5432, a fresh
// database); `floor` is bench/peers/floor-server.ts (the bare Fastify handler: no subscriber). The
// database's own work is not counted (it is another process).
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { benchFile } from '../lib/context.ts';
import { stop, waitForHttp } from '../lib/proc.ts';
import { RawPoster } from '../lib/raw-post.ts';
import { BENCH_MERCURE_ENV } from '../scenarios/mercure.ts';

const { values: v } = parseArgs({
  options: {
    system: { type: 'string', default: 'commitfeed' },
    db: { type: 'string', default: 'commitfeed_bench_ir' },
    port: { type: 'string', default: '3290' },
    conns: { type: 'string', default: '1' },
    warm: { type: 'string', default: '3000' },
    n: { type: 'string', default: '2000' },
    'server-dir': { type: 'string', default: '.' },
    'server-env': { type: 'string', default: '' },
    /** No callgrind_control: the whole process's instructions at exit (run twice with different
     * --n and subtract, where vgdb cannot reach the process). */
    'at-exit': { type: 'boolean', default: false },
  },
});
const port = Number(v.port);
const conns = Number(v.conns);
const dir = join(process.cwd(), '.callgrind');
rmSync(dir, { recursive: true, force: true });
mkdirSync(dir, { recursive: true });

async function freshDb(db: string): Promise<string> {
  const admin = new pg.Client({ connectionString: 'postgres://postgres@127.0.0.1:5432/postgres' });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
  await admin.query(`CREATE DATABASE ${db}`);
  await admin.end();
  return `postgres://postgres@127.0.0.1:5432/${db}`;
}

const env: Record<string, string | undefined> = { ...process.env, PORT: String(port) };
let script: string;
let cwd = process.cwd();
if (v.system === 'floor') script = benchFile('peers/floor-server.ts');
else {
  if (!/^[a-z_][a-z0-9_]*$/.test(v.db!)) throw new Error('--db: a plain identifier');
  cwd = v['server-dir']!;
  script = 'src/main.ts';
  Object.assign(
    env,
    { HOST: '127.0.0.1', DATABASE_URL: await freshDb(v.db!), LOG_LEVEL: 'warn' },
    BENCH_MERCURE_ENV,
  );
  for (const kv of v['server-env']!.split(',').filter(Boolean))
    env[kv.slice(0, kv.indexOf('='))] = kv.slice(kv.indexOf('=') + 1);
}
const cp = spawn(
  'valgrind',
  [
    '--tool=callgrind',
    '--smc-check=all-non-file',
    '--collect-systime=no',
    `--callgrind-out-file=${dir}/out.%p`,
    process.execPath,
    '--import',
    'tsx',
    script,
  ],
  { cwd, env, stdio: ['ignore', 'inherit', 'pipe'], detached: true },
);
let stderr = '';
cp.stderr!.on('data', (b: Buffer) => {
  stderr += b.toString();
});

function control(args: string[]): string {
  // vgdb names its files after the HOST and USER variables; the server's HOST (its listen address)
  // must be callgrind_control's too, or it looks for files that do not exist.
  return execFileSync('callgrind_control', [...args, String(cp.pid)], {
    encoding: 'utf8',
    env: { ...process.env, HOST: env.HOST },
  });
}

async function publishMany(total: number, stream: string, conns: number): Promise<number> {
  const poster = new RawPoster(port, conns, 600_000);
  let next = 0;
  let ok = 0;
  const body = JSON.stringify({ type: 'bench', data: { n: 1, msg: 'hello, world' } });
  const loop = async () => {
    while (next < total) {
      next++;
      const r = await poster.post(`/v1/streams/${stream}/events`, body);
      if (r.status === 201) ok++;
      else throw new Error(`HTTP ${r.status}: ${r.body}`);
    }
  };
  await Promise.all(Array.from({ length: conns }, loop));
  poster.close();
  return ok;
}

try {
  await waitForHttp(`http://127.0.0.1:${port}/readyz`, cp, 1_800_000);
  const t0 = performance.now();
  // One at a time first: under valgrind the first requests compile everything, slowly.
  await publishMany(200, 'ir-warm', 1);
  await publishMany(Number(v.warm), 'ir-warm', conns);
  process.stderr.write(`warm-up: ${v.warm} publishes in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`);
  if (!v['at-exit']) control(['-z']);
  const t1 = performance.now();
  const ok = await publishMany(Number(v.n), 'ir-measured', conns);
  const sec = (performance.now() - t1) / 1000;
  if (v['at-exit']) await stop(cp, 300_000);
  else control(['-d']);
  await new Promise((r) => setTimeout(r, 2000));
  // The dump after zeroing: its totals are the instructions of the measured publishes.
  const files = readdirSync(dir).filter((f) => /\.\d+$/.test(f) || /out\.\d+\.\d+/.test(f));
  let ir = 0;
  for (const f of files) {
    const text = readFileSync(join(dir, f), 'utf8');
    if (!v['at-exit'] && !/^part: *[1-9]/m.test(text)) continue;
    const m = /^(?:summary|totals): *(\d+)/m.exec(text);
    if (m) ir = Math.max(ir, Number(m[1]));
  }
  const load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  console.log(
    JSON.stringify({
      system: v.system,
      conns,
      publishes: ok,
      seconds: Number(sec.toFixed(1)),
      instructions: ir,
      perPublish: Math.round(ir / ok),
      loadavg: load,
    }),
  );
} catch (err) {
  process.stderr.write(`${(err as Error).stack}\n${stderr.slice(-3000)}\n`);
  process.exitCode = 1;
} finally {
  await stop(cp, 60_000);
  rmSync(dir, { recursive: true, force: true });
  if (v.system !== 'floor') {
    const admin = new pg.Client({ connectionString: 'postgres://postgres@127.0.0.1:5432/postgres' });
    await admin.connect();
    await admin.query(`DROP DATABASE IF EXISTS ${v.db} WITH (FORCE)`);
    await admin.end();
  }
}
