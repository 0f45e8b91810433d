// Cron schedules against a real PostgreSQL: the tick arithmetic (catch-up policies, time zones), one
// job per tick with two replicas firing at once (the (schedule, tick) key, not the lock, is what holds),
// catch-up after everything was down (an injected clock, never a sleep), and a per-second schedule
// on two live servers.
import { type Kysely, sql } from 'kysely';
import t from 'tap';
import type { Database } from '../src/db/database.ts';
import { dueTicks } from '../src/flows/schedules.ts';
import { Scheduler } from '../src/flows/scheduler.ts';
import { sqlClient, startTestServer, testDatabase, until } from './helpers.ts';
import { type Body, api } from './queue-helpers.ts';

const quiet = { janitorIntervalMs: 0, flows: false };
const log = { warn: () => {} };

async function ticksOf(
  db: Kysely<Database>,
  queue: string,
): Promise<{ tick: string; late: boolean; data: Body }[]> {
  const { rows } = await sql<{ tick: string; late: boolean; data: Body }>`
    select payload->>'tick' as tick, (payload->>'late')::boolean as late, payload->'data' as data
    from commitfeed.jobs j where queue = ${queue} order by j.id`.execute(db);
  return rows;
}

const iso = (ms: number) => new Date(ms).toISOString();

t.test('dueTicks: on-time ticks always, missed ones by policy, in the time zone', async (t) => {
  const T0 = Date.parse('2026-01-01T00:00:00Z');
  const every10 = (catchUp: 'none' | 'last' | 'all', catchUpMax = 100) => ({
    cron: '*/10 * * * * *',
    timezone: 'UTC',
    catchUp,
    catchUpMax,
  });
  const at = (due: ReturnType<typeof dueTicks>) =>
    due.fire.map((f) => `${(f.at.getTime() - T0) / 1000}${f.late ? 'L' : ''}`);
  const now = new Date(T0 + 65_000);
  t.same(at(dueTicks(every10('none'), new Date(T0), now, 30_000)), ['40', '50', '60']);
  t.same(at(dueTicks(every10('last'), new Date(T0), now, 30_000)), ['30L', '40', '50', '60']);
  t.same(at(dueTicks(every10('all', 2), new Date(T0), now, 30_000)), ['20L', '30L', '40', '50', '60']);
  t.same(at(dueTicks(every10('all'), new Date(T0), now, 30_000)), ['10L', '20L', '30L', '40', '50', '60']);
  t.equal(dueTicks(every10('none'), new Date(T0), now, 30_000).newest?.getTime(), T0 + 60_000);
  t.same(
    dueTicks(every10('all'), new Date(T0 + 60_000), now, 30_000),
    { fire: [], newest: null },
    'nothing after the last',
  );
  // 09:00 in Paris across the spring DST change (UTC+1 → UTC+2 on 2026-03-29).
  const paris = dueTicks(
    { cron: '0 9 * * *', timezone: 'Europe/Paris', catchUp: 'all', catchUpMax: 10 },
    new Date('2026-03-28T00:00:00Z'),
    new Date('2026-03-30T12:00:00Z'),
    60_000,
  );
  t.same(
    paris.fire.map((f) => f.at.toISOString()),
    ['2026-03-28T08:00:00.000Z', '2026-03-29T07:00:00.000Z', '2026-03-30T07:00:00.000Z'],
  );
  // A per-second schedule down for a year costs what it fires, not a year of ticks.
  const started = performance.now();
  const long = dueTicks(
    { cron: '* * * * * *', timezone: 'UTC', catchUp: 'last', catchUpMax: 100 },
    new Date(T0),
    new Date(T0 + 365 * 86_400_000),
    5000,
  );
  t.equal(long.fire.length, 7, 'six on time (5 s window) and the newest missed one');
  t.ok(performance.now() - started < 1000, 'fast');
});

t.test('management over HTTP, and bad input changes nothing', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, quiet);
  const put = (name: string, body: object) => api(server.url, 'PUT', `/v1/schedules/${name}`, body);
  t.match(await put('r', { cron: 'every day', queue: 'q' }), {
    status: 400,
    body: { code: 'invalid_schedule' },
  });
  t.match(await put('r', { cron: '0 3 * * *', timezone: 'Mars/Olympus', queue: 'q' }), {
    status: 400,
    body: { code: 'invalid_schedule' },
  });
  t.match(await put('r', { cron: '0 3 * * *', queue: 'q', catchUp: 'some' }), { status: 400 });
  t.match(await put('r', { cron: '0 3 * * *', queue: 'a b' }), { status: 400 });
  t.match(await put('r', { cron: '0 3 * * *', queue: 'q', job: { priority: 1.5 } }), { status: 400 });
  t.same((await api(server.url, 'GET', '/v1/schedules')).body, { schedules: [] }, 'nothing written');

  const made = await put('nightly', {
    cron: '0 3 * * *',
    timezone: 'Europe/Paris',
    queue: 'reports',
    payload: { kind: 'daily' },
    catchUp: 'all',
    catchUpMax: 3,
    job: { maxAttempts: 2 },
  });
  t.equal(made.status, 201, JSON.stringify(made.body));
  t.match(made.body, {
    name: 'nightly',
    cron: '0 3 * * *',
    timezone: 'Europe/Paris',
    queue: 'reports',
    payload: { kind: 'daily' },
    catchUp: 'all',
    catchUpMax: 3,
    maxAttempts: 2,
    paused: false,
    lastTick: null,
    ticks: 0,
  });
  t.match(made.body.nextTick, /T0[12]:00:00.000Z$/, '03:00 in Paris');
  const replaced = await put('nightly', { cron: '0 4 * * *', queue: 'reports' });
  t.equal(replaced.status, 200, 'replaced');
  t.match(replaced.body, { cron: '0 4 * * *', timezone: 'UTC', catchUp: 'last', payload: null });
  t.match((await api(server.url, 'POST', '/v1/schedules/nightly/pause')).body, { paused: true });
  t.match((await api(server.url, 'POST', '/v1/schedules/nightly/resume')).body, { paused: false });
  t.equal((await api(server.url, 'GET', '/v1/schedules')).body.schedules.length, 1);
  t.match(await api(server.url, 'GET', '/v1/schedules/nope'), {
    status: 404,
    body: { code: 'schedule_not_found' },
  });
  t.equal((await api(server.url, 'DELETE', '/v1/schedules/nightly')).status, 204);
  t.equal((await api(server.url, 'DELETE', '/v1/schedules/nightly')).status, 404);
});

t.test(
  'two replicas firing at once: exactly one job per tick, and the tick key holds without the lock',
  async (t) => {
    const dbUrl = await testDatabase(t);
    const a = await startTestServer(t, dbUrl, quiet);
    const b = await startTestServer(t, dbUrl, quiet);
    const db = sqlClient(t, dbUrl);
    const T0 = Date.parse('2026-06-01T00:00:00Z');
    t.equal(
      (await api(a.url, 'PUT', '/v1/schedules/s', { cron: '* * * * * *', queue: 'q', catchUp: 'all' }))
        .status,
      201,
    );
    await sql`update commitfeed.schedules set created_at = ${iso(T0)}::timestamptz`.execute(db);
    const schedulers = [a, b].map((s) => new Scheduler({ db: s.db, lateAfterMs: 60_000, log }));
    for (let k = 1; k <= 15; k++) {
      const now = new Date(T0 + k * 1000 + 300);
      // Several passes per replica at the same moment.
      await Promise.all(schedulers.flatMap((s) => [s.runOnce(now), s.runOnce(now)]));
    }
    let ticks = await ticksOf(db, 'q');
    t.same(
      ticks.map((x) => x.tick),
      Array.from({ length: 15 }, (_, i) => iso(T0 + (i + 1) * 1000)),
      'one job per second, none twice',
    );
    // Lose the progress (as a bad restore would): the (schedule, tick) key still refuses repeats.
    await sql`update commitfeed.schedules set last_tick = null`.execute(db);
    await Promise.all(schedulers.map((s) => s.runOnce(new Date(T0 + 15_300))));
    ticks = await ticksOf(db, 'q');
    t.equal(ticks.length, 15, 'no tick enqueued again');
    t.match((await api(a.url, 'GET', '/v1/schedules/s')).body, { ticks: 15, lastTick: iso(T0 + 15_000) });
  },
);

t.test('restart after everything was down: the catch-up policy decides', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, quiet);
  const db = sqlClient(t, dbUrl);
  const T0 = Date.parse('2026-06-01T00:00:00Z');
  for (const [name, catchUp] of [
    ['none', 'none'],
    ['last', 'last'],
    ['all', 'all'],
  ]) {
    const r = await api(server.url, 'PUT', `/v1/schedules/${name}`, {
      cron: '*/10 * * * * *',
      queue: name,
      catchUp,
      catchUpMax: 5,
      payload: name,
    });
    t.equal(r.status, 201);
  }
  await sql`update commitfeed.schedules set created_at = ${iso(T0)}::timestamptz`.execute(db);
  const scheduler = new Scheduler({ db: server.db, lateAfterMs: 30_000, log });
  const first = await scheduler.runOnce(new Date(T0 + 10_500));
  t.equal(first.jobs, 3, 'the first tick, on every schedule');
  t.equal(first.next?.getTime(), T0 + 20_000, 'the next tick');
  // Down from T0+10.5s to T0+125s: ticks 20..120 passed; 100, 110, 120 are within 30 s (on time).
  const back = await scheduler.runOnce(new Date(T0 + 125_000));
  t.equal(back.jobs, 3 + 4 + 8);
  const secs = (rows: { tick: string; late: boolean }[]) =>
    rows.map((r) => `${(Date.parse(r.tick) - T0) / 1000}${r.late ? 'L' : ''}`);
  t.same(secs(await ticksOf(db, 'none')), ['10', '100', '110', '120']);
  t.same(secs(await ticksOf(db, 'last')), ['10', '90L', '100', '110', '120']);
  t.same(secs(await ticksOf(db, 'all')), ['10', '50L', '60L', '70L', '80L', '90L', '100', '110', '120']);
  t.same((await ticksOf(db, 'all'))[0].data, 'all', 'the payload is the job data');
  t.equal((await scheduler.runOnce(new Date(T0 + 129_000))).jobs, 0, 'nothing new before 130');

  // Paused through ticks: on resume they are missed ticks like any other.
  await api(server.url, 'POST', '/v1/schedules/last/pause');
  t.equal(
    (await scheduler.runOnce(new Date(T0 + 200_000))).jobs,
    4 + 0 + 8,
    'none: on time only; all: every one',
  );
  await api(server.url, 'POST', '/v1/schedules/last/resume');
  await scheduler.runOnce(new Date(T0 + 200_000));
  t.same(secs(await ticksOf(db, 'last')).slice(5), ['160L', '170', '180', '190', '200']);
});

t.test('a per-second schedule on two live servers: one job per tick', async (t) => {
  const dbUrl = await testDatabase(t);
  const a = await startTestServer(t, dbUrl, { janitorIntervalMs: 0 });
  const b = await startTestServer(t, dbUrl, { janitorIntervalMs: 0 });
  const db = sqlClient(t, dbUrl);
  t.equal(
    (await api(a.url, 'PUT', '/v1/schedules/beat', { cron: '* * * * * *', queue: 'beat', catchUp: 'none' }))
      .status,
    201,
  );
  await until(async () => (await ticksOf(db, 'beat')).length >= 4, 15_000, 'four ticks');
  await api(a.url, 'POST', '/v1/schedules/beat/pause');
  const ticks = (await ticksOf(db, 'beat')).map((x) => x.tick);
  t.equal(new Set(ticks).size, ticks.length, 'no tick twice');
  t.ok(
    ticks.every((x) => x.endsWith('.000Z')),
    'ticks on whole seconds',
  );
  for (let i = 1; i < ticks.length; i++) {
    t.equal(Date.parse(ticks[i]) - Date.parse(ticks[i - 1]), 1000, 'consecutive seconds, none missed');
  }
  t.comment(`jobs by replica: ${a.scheduler.stats.jobs} + ${b.scheduler.stats.jobs}`);
});
