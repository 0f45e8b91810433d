// PostgreSQL CPU of one group commit's statement: a native publish group against a Mercure one of
// the same size and payload, and the parts a Mercure write adds, each alone. Every statement runs
// by itself (autocommit, as the group commit sends it) on one connection whose backend's CPU time
// is read from /proc/<pid>/schedstat before and after: CPU time, not wall time, so load from other work
// on the machine changes it little. The tail read that follows a commit is not here (the bench's
// scenario 7 counts it); this isolates what each statement costs the backend that runs it.
//
//   npx tsx bench/experiments/mercure-cost.ts [--db NAME] [--groups 1,8,32] [--events N] [--only a,b] [--setup SQL]
//
// against the PostgreSQL on 127.0.0.1:5432 (or ADMIN_URL); the database is dropped and created afresh,
// migrated, and dropped at the end.
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { migrate } from '../../src/db/migrate.ts';
import { cpuSeconds } from '../lib/sys.ts';

/** On-CPU seconds of a process: /proc/<pid>/schedstat (nanoseconds), else /proc/<pid>/stat (ticks). */
function onCpu(pid: number): number {
  try {
    return Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]) / 1e9;
  } catch {
    return cpuSeconds(pid);
  }
}

const { values: v } = parseArgs({
  options: {
    db: { type: 'string', default: 'commitfeed_mercure_cost' },
    groups: { type: 'string', default: '1,8,32' },
    events: { type: 'string', default: '6000' },
    only: { type: 'string' },
    rounds: { type: 'string', default: '3' },
    setup: { type: 'string' },
  },
});
const admin = process.env.ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const dbName = v.db!;
if (!/^[a-z_][a-z0-9_]*$/.test(dbName)) throw new Error('--db must be a plain identifier');
const url = admin.replace(/\/[^/]*$/, `/${dbName}`);

const TOPIC = 'https://bench.example/s7-mercure';
const DATA = JSON.stringify({ n: 1, msg: 'hello, world' });

/** One kind of statement: its SQL and its parameters for a group of `g` items. */
interface Kind {
  name: string;
  what: string;
  sql: string;
  params(g: number): unknown[];
}

const rep = <T>(g: number, x: () => T): T[] => Array.from({ length: g }, x);
/** The stored form of an update before change 3 (every field, the id in the row), built as JavaScript would. */
const stored = (id: string) =>
  `{"topics":${JSON.stringify([TOPIC])},"id":${JSON.stringify(id)},"private":false,"retry":null,"data":${JSON.stringify(DATA)}}`;

const KINDS: Kind[] = [
  {
    name: 'native',
    what: 'commitfeed.append_plain: a native publish group (the stream batcher)',
    sql: 'select tx, ids, ms from commitfeed.append_plain($1::text[], $2::text[], $3::json[])',
    params: (g) => [rep(g, () => 's7-native'), rep(g, () => 'bench'), rep(g, () => DATA)],
  },
  {
    name: 'mercure',
    what: "commitfeed.mercure_append: Mercure updates from SQL (the hub batcher's statement before the change)",
    sql: 'select mid from commitfeed.mercure_append($1::text[], $2::int[], $3::json[], $4::boolean[], $5::text[], $6::text[], $7::int8[], $8::boolean)',
    params: (g) => [
      rep(g, () => TOPIC),
      rep(g, () => 1),
      rep(g, () => JSON.stringify(DATA)),
      rep(g, () => false),
      rep(g, () => null),
      rep(g, () => null),
      rep(g, () => null),
      false,
    ],
  },
  {
    name: 'hub',
    what: 'the group commit statement of HTTP Mercure publishes (generated ids): append_plain with the stored updates and their canonical topics, no mid (the id is the row position, encrypted), as src/feed/queries/append-plain.ts sends it',
    sql: 'select tx, ids, ms from commitfeed.append_plain($1::text[], $2::text[], $3::json[], $4::text[], $5::text[], $6::text[], $7::int[])',
    params: (g) => [
      rep(g, () => 'mercure/updates'),
      rep(g, () => null),
      rep(g, () => `{"topics":${JSON.stringify([TOPIC])},"data":${JSON.stringify(DATA)}}`),
      rep(g, () => null),
      rep(g, () => TOPIC),
      null,
      null,
    ],
  },
  {
    name: 'hub-given',
    what: 'the same with publisher-given ids (each in mid, feed_mid_idx, and in the row)',
    sql: 'select tx, ids, ms from commitfeed.append_plain($1::text[], $2::text[], $3::json[], $4::text[], $5::text[], $6::text[], $7::int[])',
    params: (g) => {
      const ids = rep(g, () => `urn:uuid:${randomUUID()}`);
      return [
        rep(g, () => 'mercure/updates'),
        rep(g, () => null),
        ids.map(
          (id) =>
            `{"topics":${JSON.stringify([TOPIC])},"id":${JSON.stringify(id)},"data":${JSON.stringify(DATA)}}`,
        ),
        ids,
        rep(g, () => TOPIC),
        null,
        null,
      ];
    },
  },
  {
    name: 'hub-before',
    what: 'the group commit statement before change 3: every id generated as a random urn:uuid in mid and in the row, private and retry written',
    sql: 'select tx, ids, ms from commitfeed.append_plain($1::text[], $2::text[], $3::json[], $4::text[], $5::text[], $6::text[], $7::int[])',
    params: (g) => {
      const ids = rep(g, () => `urn:uuid:${randomUUID()}`);
      return [
        rep(g, () => 'mercure/updates'),
        rep(g, () => null),
        ids.map(stored),
        ids,
        rep(g, () => TOPIC),
        null,
        null,
      ];
    },
  },
  {
    name: 'plain-stored',
    what: 'append_plain of the stored update (JSON built in JavaScript, id urn:uuid from JavaScript): the feed row alone',
    sql: 'select tx, ids, ms from commitfeed.append_plain($1::text[], $2::text[], $3::json[])',
    params: (g) => [
      rep(g, () => 'mercure/updates'),
      rep(g, () => null),
      rep(g, () => stored(`urn:uuid:${randomUUID()}`)),
    ],
  },
  {
    name: 'native-sql',
    what: 'the insert and notify of append_plain as one plain statement (the floor the variants below add to)',
    sql: `with ins as (insert into commitfeed.feed (stream, type, data)
            select * from unnest($1::text[], $2::text[], $3::json[]) returning id)
          select pg_current_xact_id()::text as tx, string_agg(id::text, ',') as ids,
                 (select pg_notify('commitfeed_feed', '')) is null as n from ins`,
    params: (g) => [rep(g, () => 's7-native'), rep(g, () => 'bench'), rep(g, () => DATA)],
  },
  {
    name: 'stored-sql',
    what: 'native-sql with the stored update as data (bigger row), no mid, no topic rows',
    sql: `with ins as (insert into commitfeed.feed (stream, type, data)
            select * from unnest($1::text[], $2::text[], $3::json[]) returning id)
          select pg_current_xact_id()::text as tx, string_agg(id::text, ',') as ids,
                 (select pg_notify('commitfeed_feed', '')) is null as n from ins`,
    params: (g) => [
      rep(g, () => 'mercure/updates'),
      rep(g, () => null),
      rep(g, () => stored(`urn:uuid:${randomUUID()}`)),
    ],
  },
  {
    name: 'mid-sql',
    what: 'stored-sql + the mid column (one feed_mid_idx entry per update)',
    sql: `with ins as (insert into commitfeed.feed (stream, type, data, mid)
            select * from unnest($1::text[], $2::text[], $3::json[], $4::text[]) returning id)
          select pg_current_xact_id()::text as tx, string_agg(id::text, ',') as ids,
                 (select pg_notify('commitfeed_feed', '')) is null as n from ins`,
    params: (g) => {
      const ids = rep(g, () => `urn:uuid:${randomUUID()}`);
      return [rep(g, () => 'mercure/updates'), rep(g, () => null), ids.map(stored), ids];
    },
  },
  {
    name: 'topics-sql',
    what: 'mid-sql + one commitfeed.mercure_topics row per update (heap + 2 indexes)',
    sql: `with ins as (insert into commitfeed.feed (stream, type, data, mid, created_at)
            select u.s, u.t, u.d, u.m, clock_timestamp() from unnest($1::text[], $2::text[], $3::json[], $4::text[]) u(s, t, d, m)
            returning id, txid, created_at),
          tp as (insert into commitfeed.mercure_topics (topic, txid, id, created_at)
            select $5::text, txid, id, created_at from ins)
          select pg_current_xact_id()::text as tx, string_agg(id::text, ',') as ids,
                 (select pg_notify('commitfeed_feed', '')) is null as n from ins`,
    params: (g) => {
      const ids = rep(g, () => `urn:uuid:${randomUUID()}`);
      return [rep(g, () => 'mercure/updates'), rep(g, () => null), ids.map(stored), ids, TOPIC];
    },
  },
  {
    name: 'checks',
    what: 'the SQL restatement of the publish checks alone (mercure_invalid per update, refuse_invalid)',
    sql: `select commitfeed.refuse_invalid('x', 'update', array[cardinality($1::text[])],
            array(select commitfeed.mercure_invalid(array[t], null, null, null, true, false) from unnest($1::text[]) t))`,
    params: (g) => [rep(g, () => TOPIC)],
  },
  {
    name: 'reserved',
    what: 'commitfeed.mercure_reserved per topic alone (part of the checks)',
    sql: 'select count(*) filter (where commitfeed.mercure_reserved(t)) from unnest($1::text[]) t',
    params: (g) => [rep(g, () => TOPIC)],
  },
  {
    name: 'select1',
    what: 'an empty statement (the floor: protocol, executor start, a transaction with no writes)',
    sql: 'select $1::int as one',
    params: () => [1],
  },
];

async function exec(client: pg.Client, k: Kind, g: number, n: number): Promise<void> {
  const params = k.params(g);
  for (let i = 0; i < n; i++) await client.query({ name: k.name, text: k.sql, values: params });
}

async function main(): Promise<void> {
  const a = new pg.Client({ connectionString: admin });
  await a.connect();
  await a.query(`drop database if exists ${dbName} with (force)`);
  await a.query(`create database ${dbName}`);
  const db = new Kysely<unknown>({
    dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 1 }) }),
  });
  await migrate(db);
  await db.destroy();
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  // A variant of the schema to compare (e.g. another index), applied after the migrations.
  if (v.setup) await client.query(v.setup);
  const pid = (await client.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0].pid;
  const groups = v.groups!.split(',').map(Number);
  const total = Number(v.events);
  const kinds = v.only ? KINDS.filter((k) => v.only!.split(',').includes(k.name)) : KINDS;
  const load = () => readFileSync('/proc/loadavg', 'utf8').trim();
  console.log(
    `PostgreSQL backend CPU per item (µs), ${total} items per cell, best of ${v.rounds} rounds; loadavg ${load()}`,
  );
  console.log(`| kind | ${groups.map((g) => `group ${g}: µs/item (µs/statement)`).join(' | ')} |`);
  console.log(`| --- | ${groups.map(() => '---:').join(' | ')} |`);
  for (const k of kinds) {
    const cells: string[] = [];
    for (const g of groups) {
      const n = Math.max(20, Math.round(total / g));
      await exec(client, k, g, Math.min(n, 50)); // warm: plan, caches
      let best = Number.POSITIVE_INFINITY;
      for (let r = 0; r < Number(v.rounds); r++) {
        const c0 = onCpu(pid);
        await exec(client, k, g, n);
        best = Math.min(best, (onCpu(pid) - c0) / n);
      }
      cells.push(`${((best / g) * 1e6).toFixed(1)} (${(best * 1e6).toFixed(0)})`);
    }
    console.log(`| ${k.name} | ${cells.join(' | ')} |`);
  }
  for (const k of kinds) console.log(`- ${k.name}: ${k.what}`);
  console.log(`loadavg after: ${load()}`);
  await client.end();
  await a.query(`drop database if exists ${dbName} with (force)`);
  await a.end();
}

await main();
