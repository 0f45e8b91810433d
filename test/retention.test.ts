// Retention (issue #7) against a real PostgreSQL: partitions roll and are dropped at the boundary
// (the janitor's clock is passed in, never slept for), readers behind the trim mark get `reset` first
// (SSE and JSON), two janitors at once, publishing during a drop, and the tail query's plan.
import { sql } from 'kysely';
import t from 'tap';
import { compareCursors, parseCursor } from '../src/feed/cursor.ts';
import { RANGE_ONE_SQL } from '../src/feed/queries/read-range.ts';
import { TAIL_SQL } from '../src/feed/queries/read-tail.ts';
import { readTrimMark } from '../src/feed/queries/trim-mark.ts';
import { analyzeChanged, listPartitions, partitionName } from '../src/retention/partitions.ts';
import { openSse, publish, sleep, sqlClient, startTestServer, testDatabase, until } from './helpers.ts';

const HOUR = 3_600_000;
const DAY = 86_400_000;
const todayUtc = () => Math.floor(Date.now() / DAY) * DAY;
/** The janitor only runs when a test says so, with the clock the test gives it. */
const retention = (over: Record<string, number> = {}) => ({
  janitorIntervalMs: 0,
  partitionIntervalMs: HOUR,
  partitionPremake: 3,
  retentionMs: DAY,
  ...over,
});

const names = async (db: Parameters<typeof listPartitions>[0]) =>
  (await listPartitions(db)).map((p) => p.name);

async function readJson(url: string): Promise<{
  events: { id: string; data: unknown }[];
  next: string;
  reset?: { reason: string; resumeFrom: string };
}> {
  const res = await fetch(url);
  return (await res.json()) as never;
}

t.test('partitions roll ahead of the clock and are dropped exactly at the retention boundary', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, retention());
  const db = sqlClient(t, dbUrl);
  const d0 = todayUtc();
  const day = (n: number) =>
    `feed_p${new Date(d0 + n * DAY).toISOString().slice(0, 10).replaceAll('-', '')}_000000`;
  t.same(await names(db), ['feed_history', day(0), day(1), day(2), 'feed_default'], 'after migration');

  const a = await publish(server.url, 's', { data: 'today' });
  // A row an hour into day 3 (created_at set by hand: the clock of the rows, not of the test).
  await sql`insert into commitfeed.feed (stream, data, created_at)
            values ('s', '"later"', ${new Date(d0 + 3 * DAY + 90 * 60_000).toISOString()}::timestamptz)`.execute(
    db,
  );
  t.equal(
    (
      await sql<{
        p: string;
      }>`select tableoid::regclass::text as p from commitfeed.feed where data::text = '"later"'`.execute(db)
    ).rows[0].p,
    'commitfeed.feed_default',
    'no partition yet: the default partition takes it',
  );

  // The clock at day 3, 00:30: partitions continue hourly after day 2, three hours ahead of the clock.
  const janitor = server.janitor;
  let run = await janitor.runOnce(new Date(d0 + 3 * DAY + 30 * 60_000));
  t.ok(run.ran);
  t.same(run.errors, []);
  const hourly = (h: number) => partitionName(new Date(d0 + 3 * DAY + h * HOUR));
  // 01:00-02:00 holds the hand-made row in the default partition: it cannot be attached, it stays.
  t.same(
    run.created,
    [hourly(0), hourly(2), hourly(3)],
    'created ahead, skipping the range the default holds',
  );
  // Retention 1 day: everything that ended by day 2, 00:30 goes (history, day 0, day 1).
  t.same(run.dropped, ['feed_history', day(0), day(1)]);
  t.same(await names(db), [day(2), hourly(0), hourly(2), hourly(3), 'feed_default']);
  const mark = await readTrimMark(db);
  const dropped = parseCursor(a.body.id)!;
  t.same(mark.mark, { txid: dropped.txid, id: dropped.id }, 'the trim mark is the highest cursor dropped');

  // The boundary: at day 3, 00:00 + 1 day - 1 ms, day 2 (ending day 3, 00:00) is not old enough...
  run = await janitor.runOnce(new Date(d0 + 4 * DAY - 1));
  t.notOk(run.dropped.includes(day(2)), 'kept one millisecond before its end is a retention ago');
  // ...and at exactly day 4, 00:00 it is dropped; the hourly partition after it is not.
  run = await janitor.runOnce(new Date(d0 + 4 * DAY));
  t.same(run.dropped, [day(2)]);
  const after = await names(db);
  t.ok(after.includes(hourly(0)));
  t.ok(after.includes(hourly(24 + 2)), 'the series keeps rolling, three hours ahead of the clock');
});

t.test(
  'a reader behind the trim mark gets reset first, then the retained events, once (SSE and JSON)',
  async (t) => {
    const dbUrl = await testDatabase(t);
    const server = await startTestServer(t, dbUrl, retention());
    const old = [];
    for (let i = 0; i < 3; i++) old.push((await publish(server.url, 's', { data: `old ${i}` })).body.id);
    // The clock a retention past the end of today: today's partition (and all before it) is dropped.
    const run = await server.janitor.runOnce(new Date(todayUtc() + 2 * DAY));
    t.ok(run.dropped.length >= 2);
    const kept = [];
    for (let i = 0; i < 2; i++) kept.push((await publish(server.url, 's', { data: `new ${i}` })).body.id);
    const mark = old[2];

    // A second instance on the same database: its window is empty, it learns the mark from the table.
    const other = await startTestServer(t, dbUrl, retention());
    for (const s of [server, other]) {
      const last = parseCursor(kept[1])!;
      await until(
        () => compareCursors(s.feed.tailer.position, last) >= 0,
        10000,
        'the tailer to reach the last event',
      );
      const page = await readJson(`${s.url}/v1/streams/s/events?from=earliest`);
      t.same(page.reset, { reason: 'trimmed', resumeFrom: mark }, 'earliest on trimmed history: reset');
      t.same(
        page.events.map((e) => e.id),
        kept,
        'then the retained events',
      );
      t.equal(page.next, kept[1]);
      // Both instances alike, though `server`'s window still holds the dropped events.
      const behind = await readJson(`${s.url}/v1/streams/s/events?after=${old[0]}&limit=1`);
      t.same(behind.reset?.resumeFrom, mark);
      t.same(
        behind.events.map((e) => e.id),
        [kept[0]],
      );
      const atMark = await readJson(`${s.url}/v1/streams/s/events?after=${mark}`);
      t.equal(atMark.reset, undefined, 'a cursor at the mark missed nothing: no reset');
      t.same(
        atMark.events.map((e) => e.id),
        kept,
      );
    }

    const sse = await openSse(t, `${other.url}/v1/streams/s/events`, { 'last-event-id': old[0] });
    const got = await sse.waitFor(3);
    t.same(
      got.map((m) => [m.event, m.id]),
      [
        ['reset', mark],
        [undefined, kept[0]],
        [undefined, kept[1]],
      ],
      'reset first (its id moves Last-Event-ID to the mark), then each retained event once',
    );
    t.same(JSON.parse(got[0].data!), { reason: 'trimmed', resumeFrom: mark });
    const live = await publish(server.url, 's', { data: 'live' });
    await sse.waitFor(4);
    await sleep(200);
    t.same(
      sse.received.map((m) => m.id),
      [mark, ...kept, live.body.id],
      'no duplicate',
    );
    const fromStart = await openSse(t, `${other.url}/v1/streams/s/events?from=earliest`);
    t.same(
      (await fromStart.waitFor(4)).map((m) => m.event ?? m.id),
      ['reset', ...kept, live.body.id],
    );
  },
);

t.test('two janitors at once: one does the work, nothing breaks', async (t) => {
  const dbUrl = await testDatabase(t);
  const a = await startTestServer(t, dbUrl, retention());
  const b = await startTestServer(t, dbUrl, retention());
  const db = sqlClient(t, dbUrl);
  const start = todayUtc() + 3 * DAY;
  let ran = 0;
  for (let i = 0; i < 6; i++) {
    const now = new Date(start + i * HOUR);
    const runs = await Promise.all([a.janitor.runOnce(now), b.janitor.runOnce(now)]);
    for (const r of runs) t.same(r.errors, [], 'no errors');
    ran += runs.filter((r) => r.ran).length;
  }
  t.ok(ran >= 6, 'every round did its work');
  // Hold the lock as a third instance would: both skip.
  const held = await sql<{ ok: boolean }>`select pg_try_advisory_lock(hashtext('commitfeed.janitor')) as ok`;
  await db.connection().execute(async (conn) => {
    t.ok((await held.execute(conn)).rows[0].ok);
    const runs = await Promise.all([a.janitor.runOnce(), b.janitor.runOnce()]);
    t.same(
      runs.map((r) => r.ran),
      [false, false],
      'while another instance holds the lock, they skip',
    );
    await sql`select pg_advisory_unlock(hashtext('commitfeed.janitor'))`.execute(conn);
  });
  const parts = await names(db);
  t.equal(new Set(parts).size, parts.length);
  const last = new Date(start + 5 * HOUR + 2 * HOUR).toISOString();
  t.ok(
    parts.includes(
      `feed_p${last.slice(0, 10).replaceAll('-', '')}_${last.slice(11, 19).replaceAll(':', '')}`,
    ),
    'partitions made up to three hours ahead of the last clock',
  );
  const res = await publish(a.url, 's', { data: 1 });
  t.equal(res.status, 201, 'publishing still works');
});

t.test('publishing while a partition is being dropped loses nothing', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, retention({ retentionMs: HOUR }));
  const db = sqlClient(t, dbUrl);
  // Old history to drop, in feed_history (before today).
  await sql`insert into commitfeed.feed (stream, data, created_at)
            select 's', to_json(g), '2020-01-01'::timestamptz + g * interval '1 second'
            from generate_series(1, 20000) g`.execute(db);
  server.feed.tailer.wake();
  await server.feed.tailer.settled(5000);
  const sub = await openSse(t, `${server.url}/v1/streams/s/events`);
  const acked: string[] = [];
  let stop = false;
  const publishers = Array.from({ length: 8 }, async (_, w) => {
    for (let i = 0; !stop; i++) {
      const r = await publish(server.url, 's', { data: `${w}-${i}` });
      if (r.status !== 201) throw new Error(`publish failed: ${r.status}`);
      acked.push(r.body.id);
    }
  });
  await sleep(300);
  // Clock: an hour after today began, so exactly feed_history (ending today, 00:00) is too old.
  const t0 = Date.now();
  const run = await server.janitor.runOnce(new Date(todayUtc() + HOUR));
  t.comment(`drop took ${Date.now() - t0} ms, ${acked.length} publishes acknowledged by then`);
  await sleep(300);
  stop = true;
  await Promise.all(publishers);
  t.same(run.dropped, ['feed_history']);
  t.same(run.errors, []);
  t.ok(acked.length > 0, `${acked.length} publishes around the drop, none failed`);
  const sorted = [...acked].sort((x, y) => {
    return compareCursors(parseCursor(x)!, parseCursor(y)!);
  });
  await sub.waitFor(acked.length, 20000);
  await sleep(200);
  t.same(
    sub.received.map((m) => m.id),
    sorted,
    'the live subscriber got every acknowledged publish once, in order',
  );
  const all: string[] = [];
  let page = await readJson(`${server.url}/v1/streams/s/events?from=earliest&limit=1000`);
  t.ok(page.reset, 'a reader from earliest is told history was trimmed');
  for (;;) {
    all.push(...page.events.map((e) => e.id));
    if (page.events.length === 0) break;
    page = await readJson(`${server.url}/v1/streams/s/events?after=${page.next}&limit=1000`);
  }
  t.same(all, sorted, 'and then reads every acknowledged publish once');
});

t.test(
  'the tail and catch-up queries stay index scans on every partition as the feed grows (EXPLAIN)',
  async (t) => {
    const dbUrl = await testDatabase(t);
    const server = await startTestServer(t, dbUrl, retention({ partitionPremake: 24 }));
    const db = sqlClient(t, dbUrl);
    await server.janitor.runOnce(new Date(todayUtc() + 3 * DAY));
    // 24 hourly partitions ahead plus the daily ones, 10,000 rows in each of the newest dozen.
    for (let h = 0; h < 12; h++) {
      const at = new Date(todayUtc() + 3 * DAY + h * HOUR).toISOString();
      await sql`insert into commitfeed.feed (stream, data, created_at)
              select 's' || (g % 50), to_json(g), ${at}::timestamptz + g * interval '1 ms'
              from generate_series(1, 10000) g`.execute(db);
    }
    await sql`analyze commitfeed.feed`.execute(db);
    const { rows } = await sql<{ txid: string; id: string }>`
    select txid::text as txid, id::text as id from commitfeed.feed order by txid desc, id desc offset 100 limit 1`.execute(
      db,
    );
    const cursor = { txid: Number(rows[0].txid), id: Number(rows[0].id) };
    const upTo = { txid: Number(rows[0].txid) + 1, id: 0 };
    // The server runs these as prepared statements, and PostgreSQL switches a prepared statement to a
    // generic plan (parameters unknown) after five runs when it looks no worse: both must hold.
    const explain = (mode: string, text: string, params: string) =>
      db.connection().execute(async (conn) => {
        await sql`set plan_cache_mode = ${sql.raw(mode)}`.execute(conn);
        await sql`prepare p as ${sql.raw(text)}`.execute(conn);
        try {
          const plan = await sql<{
            'QUERY PLAN': string;
          }>`explain (costs off) execute p(${sql.raw(params)})`.execute(conn);
          return plan.rows.map((r) => r['QUERY PLAN']).join('\n');
        } finally {
          await sql`deallocate p`.execute(conn);
          await sql`reset plan_cache_mode`.execute(conn);
        }
      });
    const full = (await listPartitions(db)).filter((p) => p.rowsEstimate > 0).map((p) => p.name);
    t.equal(full.length, 12);
    for (const mode of ['force_custom_plan', 'force_generic_plan']) {
      // Near the tail (the tailer's steady state) and far behind it (a tailer catching up); a stream
      // read from the start (a subscriber catching up from `earliest`).
      const reads = [
        {
          what: 'tail',
          text: TAIL_SQL,
          params: `'${cursor.txid}', ${cursor.id}, 1000, '{}', '-infinity', '0 milliseconds'`,
          index: 'txid_id_idx',
        },
        {
          what: 'tail from 0',
          text: TAIL_SQL,
          params: `'0', 0, 1000, '{}', '-infinity', '0 milliseconds'`,
          index: 'txid_id_idx',
        },
        {
          what: 'catch-up',
          text: RANGE_ONE_SQL,
          params: `'s7', '0', 0, '${upTo.txid}', ${upTo.id}, 1000`,
          index: 'stream_txid_id_idx',
        },
      ];
      for (const read of reads) {
        const text = await explain(mode, read.text, read.params);
        const main = text.slice(text.indexOf('Nested Loop'));
        t.comment(`${mode}, ${read.what}:\n${main.split('\n').slice(0, 6).join('\n')}`);
        // The tail read's "rows waiting behind the horizon" probe (an InitPlan, before the main
        // join) must start its index scan at the horizon: with the cursor as a row comparison in
        // its Index Cond, btree starts at the cursor and walks the whole backlog on every page.
        const probe = text.slice(0, text.indexOf('Nested Loop'));
        t.notMatch(probe, /Index Cond: .*ROW\(/, `${mode}, ${read.what}: probe not keyed on the cursor`);
        for (const name of full) {
          t.match(
            main,
            new RegExp(`(Index (Only )?Scan using|Bitmap Index Scan on) ${name}_${read.index}\\b`),
            `${mode}, ${read.what}: index scan on ${name}`,
          );
          t.notMatch(
            text,
            new RegExp(`Seq Scan on ${name} `),
            `${mode}, ${read.what}: no sequential scan of ${name}`,
          );
        }
        // A custom plan may read a small stream's few rows and sort them; the generic plan, which a
        // prepared statement keeps using for every cursor and stream, must read in index order under
        // the LIMIT, never sort a whole stream to return one page.
        if (mode === 'force_generic_plan') {
          const underLimit = text.slice(text.indexOf('Limit'));
          t.notMatch(
            underLimit,
            /(^|-> +)(Incremental )?Sort\s*$/m,
            `${mode}, ${read.what}: no sort under the limit`,
          );
        }
      }
    }
  },
);

t.test('the janitor ANALYZEs partitions whose rows changed a lot since their statistics', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, retention());
  const db = sqlClient(t, dbUrl);
  const now = new Date(todayUtc() + 3 * DAY);
  await server.janitor.runOnce(now);
  const part = partitionName(new Date(todayUtc() + 3 * DAY));
  // Autovacuum, where it runs, would analyze it first: the test is about what happens without it.
  await sql`alter table ${sql.id('commitfeed', part)} set (autovacuum_enabled = off)`.execute(db);
  await sql`insert into commitfeed.feed (stream, data, created_at)
            select 's', to_json(g), ${now.toISOString()}::timestamptz
            from generate_series(1, 5000) g`.execute(db);
  // Backends report row counts to the statistics system within a second or so of going idle.
  for (let i = 0; i < 100; i++) {
    const { rows } = await sql<{ n: string }>`
      select coalesce(max(n_mod_since_analyze), 0)::text as n from pg_stat_user_tables
      where schemaname = 'commitfeed' and relname = ${part}`.execute(db);
    if (Number(rows[0].n) >= 5000) break;
    await sleep(100);
  }
  let run = await server.janitor.runOnce(now);
  t.ok(run.analyzed.includes(`commitfeed.${part}`), `${part} analysed (${run.analyzed.join(', ')})`);
  const { rows } = await sql<{ analyzed: boolean }>`
    select last_analyze is not null as analyzed from pg_stat_user_tables
    where schemaname = 'commitfeed' and relname = ${part}`.execute(db);
  t.ok(rows[0].analyzed, 'PostgreSQL records the analyze');
  run = await server.janitor.runOnce(now);
  t.notOk(run.analyzed.includes(`commitfeed.${part}`), 'not again while nothing changed');
});

t.test("the janitor's frequent check ANALYZEs a fresh partition each time it doubles", async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, retention());
  const db = sqlClient(t, dbUrl);
  const now = new Date(todayUtc() + 3 * DAY);
  await server.janitor.runOnce(now);
  const part = partitionName(now);
  const name = `commitfeed.${part}`;
  await sql`alter table ${sql.id('commitfeed', part)} set (autovacuum_enabled = off)`.execute(db);
  const add = (n: number) =>
    sql`insert into commitfeed.feed (stream, data, created_at)
        select 's', to_json(g), ${now.toISOString()}::timestamptz from generate_series(1, ${n}) g`.execute(
      db,
    );
  // Backends report row counts to the statistics system within a second or so of going idle.
  const reported = (n: number) =>
    until(
      async () => {
        const { rows } = await sql<{ n: string }>`
          select coalesce(max(n_mod_since_analyze), 0)::text as n from pg_stat_user_tables
          where schemaname = 'commitfeed' and relname = ${part}`.execute(db);
        return Number(rows[0].n) >= n;
      },
      10_000,
      `${n} changed rows reported`,
    );
  await add(1500);
  await reported(1500);
  t.ok((await analyzeChanged(db, 1000, 'doubled')).includes(name), 'analysed at 1,500 rows');
  await add(1000);
  await reported(1000);
  t.notOk(
    (await analyzeChanged(db, 1000, 'doubled')).includes(name),
    'not at 2,500 (grew by 1,000 of 1,500)',
  );
  await add(600);
  await reported(1600);
  t.ok((await analyzeChanged(db, 1000, 'doubled')).includes(name), 'again at 3,100 (grew by 1,600 of 1,500)');
});
