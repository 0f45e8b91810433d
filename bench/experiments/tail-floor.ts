// The tail read's cost against the number of feed partitions, with and without the tail floor
// (src/feed/tail-floor.ts). RETENTION=7d keeps about 12 partitions, 30d about 35; a fresh database
// has 5. For each count: a fresh database whose older partitions hold rows, then the tail read of
// the tailer's steady state (10 rows behind the end) run over and over on one connection, timed on
// the wall and in the PostgreSQL backend's own CPU (/proc, so the server must be on this machine).
// `npx tsx bench/experiments/tail-floor.ts [reads] [extra partitions, e.g. 0,8,30]` (DATABASE_URL: any server's admin database; default the
// local one at 127.0.0.1:5432).
import { readFileSync } from 'node:fs';
import { type Kysely, sql } from 'kysely';
import { createDatabase } from '../../src/db/database.ts';
import { migrate } from '../../src/db/migrate.ts';
import { readTail } from '../../src/feed/queries/read-tail.ts';
import type { Database } from '../../src/db/database.ts';

const admin = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const reads = Number(process.argv[2] ?? 3000);
const DAY = 86_400_000;
const log = { warn: () => {}, error: () => {}, info: () => {} };
const TICK_US = 10_000; // /proc/<pid>/stat counts CPU in 1/100 s

function backendCpuUs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) * TICK_US; // utime, stime
}

async function withDatabase<T>(name: string, fn: (db: Kysely<Database>) => Promise<T>): Promise<T> {
  const a = createDatabase({ url: admin, poolSize: 1, statementTimeoutMs: 60_000, log });
  await sql.raw(`drop database if exists ${name} with (force)`).execute(a.db);
  await sql.raw(`create database ${name}`).execute(a.db);
  const url = new URL(admin);
  url.pathname = `/${name}`;
  const d = createDatabase({ url: url.toString(), poolSize: 1, statementTimeoutMs: 60_000, log });
  try {
    return await fn(d.db);
  } finally {
    await d.db.destroy();
    await sql.raw(`drop database if exists ${name} with (force)`).execute(a.db);
    await a.db.destroy();
  }
}

/** Adds `extra` daily partitions below today's, each holding 2,000 rows, and 20,000 rows today. */
async function fill(db: Kysely<Database>, extra: number): Promise<number> {
  await migrate(db);
  if (extra > 0) {
    const { rows } = await sql<{ b: string }>`
      select pg_get_expr(c.relpartbound, c.oid) as b from pg_class c where c.relname = 'feed_history'`.execute(
      db,
    );
    const upper = new Date(/TO \('([^']+)'\)/.exec(rows[0].b)![1]).getTime();
    await sql`alter table commitfeed.feed detach partition commitfeed.feed_history`.execute(db);
    for (let i = extra; i >= 1; i--) {
      const lo = new Date(upper - i * DAY).toISOString();
      const hi = new Date(upper - (i - 1) * DAY).toISOString();
      await sql
        .raw(`create table commitfeed.feed_old_${i} partition of commitfeed.feed
                     for values from ('${lo}') to ('${hi}')`)
        .execute(db);
      await sql
        .raw(`insert into commitfeed.feed (stream, data, created_at)
                     select 's' || (g % 10), '{"n":1}', '${lo}'::timestamptz + g * interval '1 s'
                     from generate_series(1, 2000) g`)
        .execute(db);
    }
    const lowest = new Date(upper - extra * DAY).toISOString();
    await sql
      .raw(`alter table commitfeed.feed attach partition commitfeed.feed_history
                   for values from (minvalue) to ('${lowest}')`)
      .execute(db);
  }
  await sql`insert into commitfeed.feed (stream, data)
            select 's' || (g % 10), '{"n":1}' from generate_series(1, 20000) g`.execute(db);
  await sql`analyze commitfeed.feed`.execute(db);
  const { rows } = await sql<{ n: number }>`
    select count(*)::int as n from pg_inherits where inhparent = 'commitfeed.feed'::regclass`.execute(db);
  return rows[0].n;
}

async function measure(db: Kysely<Database>, floorAtMs: number, generic = false) {
  return db.connection().execute(async (conn) => {
    // PostgreSQL re-plans a prepared statement on every run while its custom plans look cheaper
    // than the generic one: `generic` measures the read without that planning.
    await sql.raw(`set plan_cache_mode = ${generic ? 'force_generic_plan' : 'auto'}`).execute(conn);
    const { rows } = await sql<{ pid: number; txid: string; id: string }>`
      select pg_backend_pid() as pid, txid::text as txid, id::text as id
      from commitfeed.feed f order by f.txid desc, f.id desc limit 1 offset 10`.execute(conn);
    const after = { txid: Number(rows[0].txid), id: Number(rows[0].id) };
    const floor = { atMs: floorAtMs, marginMs: 3_600_000 };
    const probe = await readTail(conn, after, 1000, undefined, floor);
    if (probe.events.length !== 10) throw new Error(`the read returned ${probe.events.length} rows, not 10`);
    for (let i = 0; i < 100; i++) await readTail(conn, after, 1000, undefined, floor); // plan, warm
    const cpu0 = backendCpuUs(rows[0].pid);
    const t0 = performance.now();
    for (let i = 0; i < reads; i++) await readTail(conn, after, 1000, undefined, floor);
    const wallUs = ((performance.now() - t0) * 1000) / reads;
    const cpuUs = (backendCpuUs(rows[0].pid) - cpu0) / reads;
    return { wallUs, cpuUs };
  });
}

const results: string[][] = [];
const extras = (process.argv[3] ?? '0,8,30').split(',').map(Number);
for (const extra of extras) {
  const row = await withDatabase(`tail_floor_bench_${extra}`, async (db) => {
    const partitions = await fill(db, extra);
    process.stderr.write(`[${new Date().toISOString().slice(11, 19)}] ${partitions} partitions: measuring\n`);
    const none = await measure(db, Number.NEGATIVE_INFINITY);
    const floor = await measure(db, Date.now() - 60_000); // a floor proved a minute ago
    const none2 = await measure(db, Number.NEGATIVE_INFINITY);
    const floor2 = await measure(db, Date.now() - 60_000);
    const generic = await measure(db, Date.now() - 60_000, true);
    const generic2 = await measure(db, Date.now() - 60_000, true);
    const f = (x: { wallUs: number; cpuUs: number }, y: { wallUs: number; cpuUs: number }) =>
      `${x.wallUs.toFixed(0)} / ${y.wallUs.toFixed(0)} µs wall, ${x.cpuUs.toFixed(0)} / ${y.cpuUs.toFixed(0)} µs PG CPU`;
    return [String(partitions), f(none, none2), f(floor, floor2), f(generic, generic2)];
  });
  results.push(row);
}
console.log(
  `\ntail read, 10 rows behind the end, ${reads} reads per point, two alternated rounds (round 1 / round 2)`,
);
console.log(
  "| partitions | no floor (every partition) | floor 1 min ago (today's and later) | floor, generic plan forced |",
);
console.log('| ---: | --- | --- | --- |');
for (const r of results) console.log(`| ${r.join(' | ')} |`);
