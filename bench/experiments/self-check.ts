// The self-check's cost (src/ops/self-check.ts): CPU per marker in the process that writes and
// follows it, in another process that only hears it, and in PostgreSQL. A fresh database; server A
// follows `markers` markers back to back (its check called directly, its timer set far off), first
// alone, then with server B on the same database (B's check off: it hears A's markers as foreign).
// Each phase is compared with as long a stretch without markers (the tailers' polls, the sampler),
// which is subtracted. PostgreSQL's CPU is the database's backends' own (/proc, so the server must be
// on this machine). `npx tsx bench/experiments/self-check.ts [markers]` (DATABASE_URL: any server's admin
// database; default: an embedded PostgreSQL started here on BENCH_PG_PORT, 25390, below the
// ephemeral port range).
import { readFileSync } from 'node:fs';
import type pg from 'pg';
import { scratchDatabase } from '../lib/scratch-database.ts';
import { loadConfig } from '../../src/config/config.ts';
import { migrate } from '../../src/db/migrate.ts';
import { createDatabase } from '../../src/db/database.ts';
import { type Server, startServer } from '../../src/server.ts';

const markers = Number(process.argv[2] ?? 2000);
const TICK_US = 10_000; // /proc/<pid>/stat counts CPU in 1/100 s
const quiet = { warn: () => {}, error: () => {}, info: () => {} };

function backendCpuUs(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(fields[11]) + Number(fields[12])) * TICK_US; // utime, stime
  } catch {
    return 0; // a backend that ended
  }
}

/** CPU so far: this process's, and the database's backends' (the pids seen so far, summed). */
async function cpu(admin: pg.Client, db: string, pids: Set<number>): Promise<{ node: number; pg: number }> {
  const { rows } = await admin.query<{ pid: number }>('select pid from pg_stat_activity where datname = $1', [
    db,
  ]);
  for (const r of rows) pids.add(r.pid);
  const u = process.cpuUsage();
  let pgUs = 0;
  for (const pid of pids) pgUs += backendCpuUs(pid);
  return { node: u.user + u.system, pg: pgUs };
}

async function phase(label: string, a: Server, admin: pg.Client, db: string): Promise<void> {
  const pids = new Set<number>();
  for (let i = 0; i < 50; i++) await a.selfCheck.check(); // warm up: plans, JIT, connections
  const c0 = await cpu(admin, db, pids);
  const t0 = performance.now();
  for (let i = 0; i < markers; i++) {
    const missed = await a.selfCheck.check();
    if (missed.length > 0) throw new Error(`marker ${i} missed ${missed.join(', ')}`);
  }
  const wallMs = performance.now() - t0;
  const c1 = await cpu(admin, db, pids);
  await new Promise((r) => setTimeout(r, wallMs)); // as long without markers: the baseline
  const c2 = await cpu(admin, db, pids);
  const per = (k: 'node' | 'pg') => (c1[k] - c0[k] - (c2[k] - c1[k])) / markers;
  console.log(
    `${label}: ${((wallMs * 1000) / markers).toFixed(0)} µs wall per marker; CPU per marker: ` +
      `${per('node').toFixed(0)} µs in Node, ${per('pg').toFixed(0)} µs in PostgreSQL ` +
      `(baseline over ${(wallMs / 1000).toFixed(1)} s: ${((c2.node - c1.node) / 1000).toFixed(0)} ms Node, ` +
      `${((c2.pg - c1.pg) / 1000).toFixed(0)} ms PostgreSQL)`,
  );
}

const db = await scratchDatabase('selfcheck', 25390);
const { admin, name } = db;
const url = new URL(db.url);
const servers: Server[] = [];
try {
  const m = createDatabase({ url: url.toString(), poolSize: 1, statementTimeoutMs: 60_000, log: quiet });
  await migrate(m.db);
  await m.db.destroy();
  const config = { ...loadConfig({}), port: 0, databaseUrl: url.toString(), logLevel: 'silent' };
  // The timer's first check would come after 24 days: every check here is called directly.
  const a = await startServer({ ...config, selfCheckIntervalMs: 24 * 86_400_000 });
  servers.push(a);
  await phase('one process', a, admin, name);
  const b = await startServer({ ...config, selfCheckIntervalMs: 0 });
  servers.push(b);
  const heard = b.feed.listener.stats.foreignMarkers;
  await phase('with a second process hearing them', a, admin, name);
  console.log(
    `the second process heard ${b.feed.listener.stats.foreignMarkers - heard} foreign markers and read ` +
      `${b.feed.tailer.stats.reads} times in all (its polls)`,
  );
} finally {
  for (const s of servers.reverse()) await s.close();
  await db.drop();
}
