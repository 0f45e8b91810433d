// The hot feed queries run as named prepared statements (src/db/prepared.ts): once per connection
// they are parsed and planned, then only executed. Checked on the connection itself (prepared
// statements are per session), with PREPARED_STATEMENTS off, and across a partition being added
// while statements planned before it stay cached.
import { sql } from 'kysely';
import t from 'tap';
import { createDatabase } from '../src/db/database.ts';
import { migrate } from '../src/db/migrate.ts';
import { START } from '../src/feed/cursor.ts';
import { appendEvents } from '../src/feed/queries/append.ts';
import { TAIL_SQL, readTail } from '../src/feed/queries/read-tail.ts';
import { createPartition } from '../src/retention/partitions.ts';
import { testDatabase } from './helpers.ts';

const log = { warn() {}, error() {} };
const event = (n: number) => ({ stream: 'p', type: null, key: null, data: JSON.stringify({ n }) });

async function open(t: { teardown(fn: () => unknown): void }, url: string, preparedStatements: boolean) {
  const { db } = createDatabase({ url, poolSize: 2, statementTimeoutMs: 5000, log, preparedStatements });
  t.teardown(() => db.destroy());
  await migrate(db);
  return db;
}

t.test('publishes and tail reads are prepared once per connection', async (t) => {
  const db = await open(t, await testDatabase(t), true);
  await db.connection().execute(async (conn) => {
    for (let i = 0; i < 3; i++) await appendEvents(conn, [event(i)]);
    const page = await readTail(conn, START, 100);
    t.equal(page.events.length, 3, 'the prepared tail read returns every event');
    const { rows } = await sql<{ name: string; statement: string }>`
      select name, statement from pg_prepared_statements order by name`.execute(conn);
    t.ok(
      rows.some((r) => r.statement.includes('commitfeed.append(')),
      'the append statement is prepared',
    );
    t.ok(
      rows.some((r) => r.statement.includes('pg_snapshot_xmin')),
      'the tail read is prepared',
    );
    t.ok(
      rows.every((r) => r.name.startsWith('commitfeed_')),
      'only our named statements',
    );
    t.equal(new Set(rows.map((r) => r.name)).size, rows.length, 'each one prepared once');
  });
});

t.test('a prepared tail read sees rows in a partition created after it was planned', async (t) => {
  const db = await open(t, await testDatabase(t), true);
  await db.connection().execute(async (conn) => {
    // Plan it more than five times (PostgreSQL may switch to a generic plan after five).
    for (let i = 0; i < 7; i++) await readTail(conn, START, 100);
    const from = new Date(Date.UTC(2100, 0, 1));
    t.ok(await createPartition(conn, from, new Date(Date.UTC(2100, 0, 2)), 1000), 'partition created');
    await sql`insert into commitfeed.feed (stream, data, created_at)
              values ('p', '{"future":true}', ${from.toISOString()}::timestamptz)`.execute(conn);
    const page = await readTail(conn, START, 100);
    t.same(
      page.events.map((e) => e.data),
      ['{"future":true}'],
      'the row in the new partition is read',
    );
  });
});

t.test('PREPARED_STATEMENTS=off sends every query unnamed', async (t) => {
  const db = await open(t, await testDatabase(t), false);
  await db.connection().execute(async (conn) => {
    await appendEvents(conn, [event(1)]);
    t.equal((await readTail(conn, START, 100)).events.length, 1);
    const { rows } = await sql<{ n: number }>`
      select count(*)::int as n from pg_prepared_statements`.execute(conn);
    t.equal(rows[0].n, 0, 'nothing prepared');
  });
});

t.test('the tail read keeps index scans when planned on a fresh, unanalysed feed', async (t) => {
  // A prepared statement's generic plan is made once per connection, here while the day's partition
  // is nearly empty and has no statistics (autovacuum off), and kept while the partition grows
  // until an ANALYZE invalidates it: a sequential scan planned now would run on every tail read.
  const db = await open(t, await testDatabase(t), true);
  await db.connection().execute(async (conn) => {
    for (let i = 0; i < 3; i++) await appendEvents(conn, [event(i)]);
    await sql`set plan_cache_mode = force_generic_plan`.execute(conn);
    await sql`prepare tail_probe as ${sql.raw(TAIL_SQL)}`.execute(conn);
    // Without a tail floor, and with one (the tailer's steady state, see tail-floor.ts).
    for (const floor of ['-infinity', new Date(Date.now() - 60_000).toISOString()]) {
      const { rows } = await sql<{ 'QUERY PLAN': string }>`
        explain (costs off) execute tail_probe('1', 1, 1000, '{}', ${sql.lit(floor)}, '1 hour')`.execute(
        conn,
      );
      const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
      t.notMatch(plan, /Seq Scan on feed_/, `floor ${floor}: no sequential scan of a feed partition`);
      t.match(
        plan,
        /Index (Only )?Scan Backward using feed_\w+_txid_id_idx/,
        `floor ${floor}: the probe reads the last row by index`,
      );
    }
  });
});

t.test(
  'a feed-read pool (genericPlans) runs the tail read on its generic plan from the first run',
  async (t) => {
    // On a fresh feed PostgreSQL may find custom plans cheaper and plan the read again on every run
    // (570–720 µs of its CPU per read in bench/HISTORY.md); the tail's own pool never does.
    const url = await testDatabase(t);
    const { db } = createDatabase({ url, poolSize: 1, statementTimeoutMs: 5000, log, genericPlans: true });
    t.teardown(() => db.destroy());
    for (let i = 0; i < 3; i++) await appendEvents(db, [event(i)]);
    for (let i = 0; i < 12; i++) t.equal((await readTail(db, START, 100)).events.length, 3);
    const { rows } = await sql<{ generic_plans: string; custom_plans: string }>`
    select generic_plans::text, custom_plans::text from pg_prepared_statements
    where statement like '%pg_snapshot_xmin%'`.execute(db);
    t.equal(rows.length, 1, 'the tail read is prepared on the one connection');
    t.equal(rows[0].custom_plans, '0', 'never planned with its parameters');
    t.equal(rows[0].generic_plans, '12', 'every run used the generic plan');
    const { rows: mode } = await sql<{ m: string }>`select current_setting('plan_cache_mode') as m`.execute(
      db,
    );
    t.equal(mode[0].m, 'force_generic_plan');
  },
);
