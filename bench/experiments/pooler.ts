// What running behind a transaction-mode pooler costs (docs/operations.md, "Behind a connection
// pooler"): per operation, wall time and CPU in Node, in PostgreSQL's backends and in PgBouncer, for
// three set-ups of one server process on one database:
//   direct        DATABASE_URL on PostgreSQL (no DIRECT_DATABASE_URL: settings sent at connect)
//   pooled-mode   DATABASE_URL and DIRECT_DATABASE_URL both on PostgreSQL: the pooled code path
//                 (SET LOCAL per transaction, an autocommit statement wrapped) without a pooler
//   pgbouncer     DATABASE_URL on Debian's PgBouncer in transaction mode (test/pgbouncer.ts)
// Operations, one at a time: an autocommit statement on the query pool, a transaction of one
// statement, and a single-event HTTP publish. CPU is read from /proc, so everything must run on this
// machine. `npx tsx bench/experiments/pooler.ts [operations]` (DATABASE_URL: any server's admin database;
// default: an embedded PostgreSQL on BENCH_PG_PORT, 25391).
import { readFileSync } from 'node:fs';
import { sql } from 'kysely';
import type pg from 'pg';
import { scratchDatabase } from '../lib/scratch-database.ts';
import { loadConfig } from '../../src/config/config.ts';
import { createDatabase } from '../../src/db/database.ts';
import { migrate } from '../../src/db/migrate.ts';
import { type Server, startServer } from '../../src/server.ts';
import { startPgBouncer } from '../../test/pgbouncer.ts';

const n = Number(process.argv[2] ?? 2000);
const TICK_US = 10_000; // /proc/<pid>/stat counts CPU in 1/100 s
const quiet = { warn: () => {}, error: () => {}, info: () => {} };

function procCpuUs(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(fields[11]) + Number(fields[12])) * TICK_US; // utime, stime
  } catch {
    return 0; // a backend that ended
  }
}

async function cpu(admin: pg.Client, db: string, pids: Set<number>, bouncer?: number) {
  const { rows } = await admin.query<{ pid: number }>('select pid from pg_stat_activity where datname = $1', [
    db,
  ]);
  for (const r of rows) pids.add(r.pid);
  const u = process.cpuUsage();
  let pgUs = 0;
  for (const pid of pids) pgUs += procCpuUs(pid);
  return { node: u.user + u.system, pg: pgUs, bouncer: bouncer ? procCpuUs(bouncer) : 0 };
}

type Op = [string, (s: Server) => Promise<unknown>];
const OPS: Op[] = [
  ['autocommit statement', (s) => sql`select 1`.execute(s.db)],
  ['transaction of one statement', (s) => s.db.transaction().execute((trx) => sql`select 1`.execute(trx))],
  [
    'HTTP publish',
    async (s) => {
      const res = await fetch(`${s.url}/v1/streams/bench/events`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"data":1}',
      });
      await res.arrayBuffer();
      if (res.status !== 201) throw new Error(`publish: ${res.status}`);
    },
  ],
];

async function measure(label: string, s: Server, admin: pg.Client, db: string, bouncer?: number) {
  const pids = new Set<number>();
  for (const [what, op] of OPS) {
    for (let i = 0; i < 100; i++) await op(s); // warm up
    const c0 = await cpu(admin, db, pids, bouncer);
    const t0 = performance.now();
    for (let i = 0; i < n; i++) await op(s);
    const wallUs = ((performance.now() - t0) * 1000) / n;
    const c1 = await cpu(admin, db, pids, bouncer);
    const per = (k: 'node' | 'pg' | 'bouncer') => ((c1[k] - c0[k]) / n).toFixed(0);
    console.log(
      `| ${label} | ${what} | ${wallUs.toFixed(0)} | ${per('node')} | ${per('pg')} | ${bouncer ? per('bouncer') : '-'} |`,
    );
  }
}

const db = await scratchDatabase('pooler', 25391);
const { admin, name } = db;
const url = new URL(db.url);
const direct = url.toString();
const teardowns: (() => unknown)[] = [];
try {
  const m = createDatabase({ url: direct, poolSize: 1, statementTimeoutMs: 60_000, log: quiet });
  await migrate(m.db);
  await m.db.destroy();
  const bouncer = await startPgBouncer({ teardown: (fn) => teardowns.push(fn) }, direct);
  const bouncerPid = bouncer.pid();
  const config = { ...loadConfig({}), port: 0, logLevel: 'silent', selfCheckIntervalMs: 0 };
  console.log(
    `${n} operations each, one at a time; load before: ${readFileSync('/proc/loadavg', 'utf8').trim()}`,
  );
  console.log('| set-up | operation | wall µs | Node CPU µs | PostgreSQL CPU µs | PgBouncer CPU µs |');
  console.log('|---|---|---:|---:|---:|---:|');
  for (const [label, databaseUrl, directDatabaseUrl] of [
    ['direct', direct, undefined],
    ['pooled-mode', direct, direct],
    ['pgbouncer', bouncer.url(direct), direct],
  ] as const) {
    const s = await startServer({ ...config, databaseUrl, directDatabaseUrl });
    try {
      await measure(label, s, admin, name, label === 'pgbouncer' ? bouncerPid : undefined);
    } finally {
      await s.close();
    }
  }
  console.log(`load after: ${readFileSync('/proc/loadavg', 'utf8').trim()}`);
} finally {
  for (const fn of teardowns.reverse()) await fn();
  await db.drop();
}
