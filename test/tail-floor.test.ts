// The tail floor (src/feed/tail-floor.ts, TailFloor in src/feed/queries/read-tail.ts): the tail read
// skips partitions wholly below a time under which every row has been read. It must trail, never
// lead: a transaction that inserted while the floor was lower and commits much later is still read
// live, and a clock that steps back drops the floor. (The EXPLAIN test in retention.test.ts checks which partitions a
// floor skips; with the 50ms margin the test helpers set, every SSE, consistency and chaos test runs
// across a moving floor too.)
import { sql } from 'kysely';
import t from 'tap';
import { floorMark } from '../src/feed/queries/floor-mark.ts';
import { TAIL_SQL } from '../src/feed/queries/read-tail.ts';
import { TailFloorTracker } from '../src/feed/tail-floor.ts';
import { listPartitions } from '../src/retention/partitions.ts';
import {
  openSse,
  pgClient,
  publish,
  sleep,
  sqlClient,
  startTestServer,
  testDatabase,
  until,
} from './helpers.ts';

const page = (clockMs: number | null, horizon: number) => ({ clockMs, horizon });

t.test('the tracker: a mark becomes the floor only once a caught-up page passes its id', async (t) => {
  const f = new TailFloorTracker(100);
  t.equal(f.floor?.atMs, Number.NEGATIVE_INFINITY, 'no floor before any mark');
  t.equal(f.wantsMark(5_000), true, 'it asks for a mark');
  t.equal(f.wantsMark(5_500), false, 'not twice within a second');
  f.offer({ atMs: 10_000, xid: 50 }, f.resets);
  t.equal(f.wantsMark(7_000), false, 'nor while it holds one');
  f.observe(page(11_000, 50), true);
  t.equal(
    f.floor?.atMs,
    Number.NEGATIVE_INFINITY,
    'a horizon at the mark (it may still run) does not pass it',
  );
  f.observe(page(12_000, 55), false);
  t.equal(f.floor?.atMs, Number.NEGATIVE_INFINITY, 'a full page (rows left below the horizon) does not');
  f.observe(page(13_000, 51), true);
  t.equal(f.floor?.atMs, 10_000 - 100, 'a caught-up page past it does: T − margin');
  t.same(f.floor, { atMs: 9_900, marginMs: 100 }, 'the statement gets the margin too');
  t.equal(f.wantsMark(7_100), true, 'then it asks for the next');
  f.offer({ atMs: 14_000, xid: 60 }, f.resets);
  f.observe(page(15_000, 61), true);
  t.equal(f.floor?.atMs, 13_900, 'and the floor moves on');
});

t.test('the tracker: standby pages (no clock) pass a mark like any other', async (t) => {
  const f = new TailFloorTracker(100);
  f.offer({ atMs: 10_000, xid: 50 }, f.resets);
  f.observe(page(null, 60), true);
  t.equal(f.floor?.atMs, 9_900);
});

t.test(
  'the tracker: a clock that steps back drops the floor; small steps are within the margin',
  async (t) => {
    const f = new TailFloorTracker(5_000);
    f.observe(page(100_000, 5), true);
    f.offer({ atMs: 101_000, xid: 10 }, f.resets);
    f.observe(page(101_500, 15), true);
    t.equal(f.floor?.atMs, 96_000);
    t.equal(f.observe(page(101_000, 15), true), false, 'a step back under a second is not a reset');
    t.equal(f.floor?.atMs, 96_000, 'and the floor stays');
    f.offer({ atMs: 101_200, xid: 20 }, f.resets);
    t.equal(f.observe(page(40_000, 25), true), true, 'a minute back is');
    t.equal(
      f.floor?.atMs,
      Number.NEGATIVE_INFINITY,
      'every partition is read again, the mark held is dropped',
    );
    t.equal(f.resets, 1);
    f.offer({ atMs: 101_300, xid: 22 }, 0);
    f.observe(page(40_100, 23), true);
    t.equal(f.floor?.atMs, Number.NEGATIVE_INFINITY, 'a mark asked for before the step is not taken');
    f.offer({ atMs: 41_000, xid: 30 }, f.resets);
    f.observe(page(41_500, 31), true);
    t.equal(f.floor?.atMs, 36_000, 'a new floor comes from marks after the step');
  },
);

t.test('the tracker: margin 0 is no floor at all', async (t) => {
  const f = new TailFloorTracker(0);
  t.equal(f.wantsMark(10_000), false);
  f.offer({ atMs: 10_000, xid: 50 }, f.resets);
  f.observe(page(11_000, 55), true);
  t.equal(f.floor, undefined);
});

t.test('commitfeed.floor_mark: its id is above every transaction that had one before its time', async (t) => {
  const url = await testDatabase(t);
  const db = sqlClient(t, url);
  // A transaction that takes an id and keeps running: a snapshot's xmax can be at or below it.
  const running = await pgClient(t, url);
  await running.query('begin');
  const { rows } = await running.query<{ x: string }>('select pg_current_xact_id()::text as x');
  const old = Number(rows[0].x);
  const { rows: snap } = await sql<{ xmax: string }>`
    select pg_snapshot_xmax(pg_current_snapshot())::text as xmax`.execute(db);
  t.ok(
    Number(snap[0].xmax) <= old,
    `a snapshot's xmax (${snap[0].xmax}) need not pass a running id (${old})`,
  );
  const mark = await floorMark(db);
  t.ok(mark.xid > old, `the mark's id (${mark.xid}) is above it`);
  t.ok(mark.atMs <= Date.now() + 1000, 'and its time is the database clock');
  await running.query('rollback');
});

t.test(
  'a transaction held open while the floor rises past its insert is read live when it commits',
  async (t) => {
    const dbUrl = await testDatabase(t);
    const server = await startTestServer(t, dbUrl, { tailFloorMarginMs: 50, pollIntervalMs: 50 });
    const sub = await openSse(t, `${server.url}/v1/streams/held/events`);
    const before = await publish(server.url, 'held', { data: { n: 0 } });
    t.equal(before.status, 201);
    // Inserted now, committed ~1.5 s later: meanwhile other commits keep the tailer reading.
    const holder = await pgClient(t, dbUrl);
    await holder.query('begin');
    await holder.query(`select commitfeed.publish('held', '{"n":"held"}'::jsonb)`);
    const floorThen = server.feed.tailer.floorAtMs;
    const others: string[] = [];
    for (let i = 1; i <= 30; i++) {
      const r = await publish(server.url, 'held', { data: { n: i } });
      t.equal(r.status, 201);
      others.push(r.body.id);
      await sleep(50);
    }
    // Commits after the held transaction's id are not final until it ends: the floor may not pass it.
    await sleep(200);
    const insertedAt = Date.now() - 1500;
    t.ok(
      server.feed.tailer.floorAtMs < insertedAt,
      `the floor (${server.feed.tailer.floorAtMs}) stays below the held insert (~${insertedAt})`,
    );
    t.equal(sub.received.length, 1, 'nothing after the held transaction is delivered while it is open');
    await holder.query('commit');
    const got = await sub.waitFor(32, 10_000);
    t.same(
      got.map((m) => JSON.parse(m.data ?? 'null').n),
      [0, 'held', ...others.map((_, i) => i + 1)],
      'the held event arrives, in feed order, and everything after it',
    );
    await until(
      () => server.feed.tailer.floorAtMs > insertedAt,
      10_000,
      'the floor to rise once it committed',
    );
    t.ok(floorThen <= server.feed.tailer.floorAtMs, 'the floor only moves up');
  },
);

t.test(
  'with a floor, the tail read skips the partitions wholly below it (EXPLAIN, both plan kinds)',
  async (t) => {
    const db = sqlClient(t, await testDatabase(t));
    await sql`insert into commitfeed.feed (stream, data) select 's', to_json(g) from generate_series(1, 100) g`.execute(
      db,
    );
    await sql`analyze commitfeed.feed`.execute(db);
    const scanned = (mode: string, floor: string) =>
      db.connection().execute(async (conn) => {
        await sql`set plan_cache_mode = ${sql.raw(mode)}`.execute(conn);
        await sql`prepare p as ${sql.raw(TAIL_SQL)}`.execute(conn);
        try {
          const { rows } = await sql<{ 'QUERY PLAN': string }>`
          explain (analyze, costs off, timing off, summary off)
          execute p('0', 0, 1000, '{}', ${sql.lit(floor)}, '0 milliseconds')`.execute(conn);
          const text = rows.map((r) => r['QUERY PLAN']).join('\n');
          return [...new Set([...text.matchAll(/ on (feed_\w+) [wf]/g)].map((m) => m[1]))].sort();
        } finally {
          await sql`deallocate p`.execute(conn);
          await sql`reset plan_cache_mode`.execute(conn);
        }
      });
    const partitions = (await listPartitions(db)).map((p) => p.name);
    t.ok(partitions.includes('feed_history'), 'the feed has a history partition below today');
    const aMinuteAgo = new Date(Date.now() - 60_000).toISOString();
    for (const mode of ['force_custom_plan', 'force_generic_plan']) {
      const all = await scanned(mode, '-infinity');
      t.same(all, [...partitions].sort(), `${mode}: without a floor, every partition`);
      const above = await scanned(mode, aMinuteAgo);
      t.notOk(above.includes('feed_history'), `${mode}: with a floor, not the history below it (${above})`);
      t.same(
        above,
        all.filter((p) => p !== 'feed_history'),
        `${mode}: and every partition from the floor on`,
      );
    }
  },
);
