// Stream subscriptions against a real PostgreSQL: every committed event becomes exactly one job, in
// commit order — with transactions committing out of id order, a rolled-back publish, two replicas
// following at once, a follower whose connection dies mid-step, and retention overtaking a paused
// stream subscription (reported, never skipped in silence).
import { type Kysely, sql } from 'kysely';
import t from 'tap';
import { type Database, createDatabase } from '../src/db/database.ts';
import { Follower } from '../src/flows/follower.ts';
import { feedTag, pgClient, publish, sqlClient, startTestServer, testDatabase, until } from './helpers.ts';
import { type Body, api, claim } from './queue-helpers.ts';

const HOUR = 3_600_000;
const DAY = 86_400_000;
const todayUtc = () => Math.floor(Date.now() / DAY) * DAY;
/** No janitor unless a test runs it with its own clock. */
const quiet = { janitorIntervalMs: 0 };

interface JobRow {
  id: string;
  cursor: string;
  data: Body;
  type: string | null;
}

/** The jobs of `queue` in id order, with the event each came from. */
async function jobsOf(db: Kysely<Database>, queue: string): Promise<JobRow[]> {
  const { rows } = await sql<JobRow>`
    select id::text as id, payload->>'cursor' as cursor, payload->'data' as data, payload->>'type' as type
    from commitfeed.jobs j where queue = ${queue} order by j.id`.execute(db);
  return rows;
}

/** Every event of `stream` in feed order (txid, id), as cursors (tagged, as the jobs carry them). */
async function eventsOf(db: Kysely<Database>, stream: string): Promise<string[]> {
  const tag = await feedTag(db);
  const { rows } = await sql<{ c: string }>`
    select txid::text || '-' || id::text as c from commitfeed.feed where stream = ${stream}
    order by txid, id`.execute(db);
  return rows.map((r) => `${r.c}.${tag}`);
}

const subscribe = (base: string, body: object) => api(base, 'POST', '/v1/subscriptions', body);

t.test('every event becomes one job, in order, with the type filter; management over HTTP', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, quiet);
  const db = sqlClient(t, dbUrl);
  await publish(server.url, 'orders', { type: 'created', data: { n: 0 } });

  const all = await subscribe(server.url, {
    name: 'all-orders',
    stream: 'orders',
    queue: 'audit',
    from: 'earliest',
  });
  t.equal(all.status, 201, JSON.stringify(all.body));
  t.match(all.body, {
    name: 'all-orders',
    stream: 'orders',
    type: null,
    queue: 'audit',
    paused: false,
    jobs: 0,
  });
  const created = await subscribe(server.url, {
    name: 'emails',
    stream: 'orders',
    type: 'created',
    queue: 'emails',
    job: { priority: 3, maxAttempts: 2 },
  });
  t.equal(created.status, 201);

  for (let i = 1; i <= 6; i++) {
    await publish(server.url, 'orders', { type: i % 2 ? 'created' : 'paid', key: `k${i}`, data: { n: i } });
  }
  await until(async () => (await jobsOf(db, 'audit')).length === 7, 10_000, 'audit gets 7 jobs');
  await until(async () => (await jobsOf(db, 'emails')).length === 3, 10_000, 'emails gets 3 jobs');
  const audit = await jobsOf(db, 'audit');
  t.same(
    audit.map((j) => j.cursor),
    await eventsOf(db, 'orders'),
    'one job per event, in feed order (from earliest: the event before the stream subscription too)',
  );
  t.same(
    (await jobsOf(db, 'emails')).map((j) => j.data.n),
    [1, 3, 5],
    'latest: only events after creation; only type created',
  );

  const [job] = await claim(server.url, 'emails');
  t.match(job.payload, {
    subscription: 'emails',
    stream: 'orders',
    type: 'created',
    key: 'k1',
    data: { n: 1 },
  });
  t.match(job, { maxAttempts: 2 });

  const got = await api(server.url, 'GET', '/v1/subscriptions/emails');
  t.match(got.body, { name: 'emails', jobs: 3, lostEvents: 0, lastLoss: null, type: 'created' });
  t.equal((await api(server.url, 'GET', '/v1/subscriptions')).body.subscriptions.length, 2);

  // Pause: events wait behind the cursor; resume: they become jobs.
  t.match((await api(server.url, 'POST', '/v1/subscriptions/emails/pause')).body, { paused: true });
  await publish(server.url, 'orders', { type: 'created', data: { n: 7 } });
  await until(async () => (await jobsOf(db, 'audit')).length === 8, 10_000, 'audit keeps going');
  t.equal((await jobsOf(db, 'emails')).length, 3, 'a paused stream subscription makes no job');
  t.match((await api(server.url, 'POST', '/v1/subscriptions/emails/resume')).body, { paused: false });
  await until(async () => (await jobsOf(db, 'emails')).length === 4, 10_000, 'resumed: the waiting event');

  // Bad input: 4xx with a code, nothing written.
  const dup = await subscribe(server.url, { name: 'emails', stream: 'x', queue: 'q' });
  t.match(dup, { status: 409, body: { code: 'subscription_exists' } });
  const badName = await subscribe(server.url, { name: 'a b', stream: 'x', queue: 'q' });
  t.match(badName, { status: 400, body: { code: 'invalid_request' } });
  const badFrom = await subscribe(server.url, { name: 'z', stream: 'x', queue: 'q', from: 'yesterday' });
  t.equal(badFrom.status, 400);
  const badJob = await subscribe(server.url, { name: 'z', stream: 'x', queue: 'q', job: { maxAttempts: 0 } });
  t.equal(badJob.status, 400);
  t.equal(
    (await api(server.url, 'GET', '/v1/subscriptions')).body.subscriptions.length,
    2,
    'nothing written',
  );
  t.match(await api(server.url, 'GET', '/v1/subscriptions/nope'), {
    status: 404,
    body: { code: 'subscription_not_found' },
  });

  t.equal((await api(server.url, 'DELETE', '/v1/subscriptions/emails')).status, 204);
  t.equal((await api(server.url, 'DELETE', '/v1/subscriptions/emails')).status, 404);
  t.equal((await jobsOf(db, 'emails')).length, 4, 'its jobs stay');
});

t.test('out-of-order commits: no event skipped, jobs in commit order; a rollback makes no job', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, quiet);
  const db = sqlClient(t, dbUrl);
  t.equal((await subscribe(server.url, { name: 's', stream: 'orders', queue: 'q' })).status, 201);

  // A takes the lower txid and id, and commits last.
  const a = await pgClient(t, dbUrl);
  await a.query('begin');
  await a.query(`select commitfeed.publish('orders', '{"who":"a"}')`);
  // B commits first (through the server), then a rolled-back C.
  t.equal((await publish(server.url, 'orders', { data: { who: 'b' } })).status, 201);
  const c = await pgClient(t, dbUrl);
  await c.query('begin');
  await c.query(`select commitfeed.publish('orders', '{"who":"c"}')`);
  await c.query('rollback');
  // B is past the horizon A holds: the follower must not jump over A. Give it several passes.
  await server.follower.pass();
  await server.follower.pass();
  t.same(await jobsOf(db, 'q'), [], 'nothing while A is open (B waits behind the horizon)');
  await a.query('commit');
  await until(async () => (await jobsOf(db, 'q')).length === 2, 10_000, 'both jobs');
  const jobs = await jobsOf(db, 'q');
  t.same(
    jobs.map((j) => j.data.who),
    ['a', 'b'],
    'feed order (txid, id): A first, B second, C never',
  );
  t.same(
    jobs.map((j) => j.cursor),
    await eventsOf(db, 'orders'),
  );
});

t.test('two replicas following at once: exactly one job per event', async (t) => {
  const dbUrl = await testDatabase(t);
  const one = await startTestServer(t, dbUrl, { ...quiet, pageSize: 37 });
  const two = await startTestServer(t, dbUrl, { ...quiet, pageSize: 37 });
  const db = sqlClient(t, dbUrl);
  t.equal((await subscribe(one.url, { name: 's', stream: 'orders', queue: 'q' })).status, 201);
  // Concurrent publishers on both replicas: many transactions, committing in every order.
  const N = 400;
  await Promise.all(
    Array.from({ length: 8 }, async (_, w) => {
      for (let i = w; i < N; i += 8) {
        const target = i % 2 ? one : two;
        const r = await publish(target.url, 'orders', { data: { i } });
        if (r.status !== 201) throw new Error(`publish ${r.status}`);
      }
    }),
  );
  await until(async () => (await jobsOf(db, 'q')).length >= N, 20_000, `${N} jobs`);
  // Both followers pass once more: nothing new may appear.
  await Promise.all([one.follower.pass(), two.follower.pass()]);
  const jobs = await jobsOf(db, 'q');
  t.equal(jobs.length, N, 'no event doubled');
  t.same(
    jobs.map((j) => j.cursor),
    await eventsOf(db, 'orders'),
    'each event once, in feed order',
  );
  // Which replica wins each follow step is up to the row lock; both usually do.
  t.comment(`follow steps by replica: ${one.follower.stats.steps} + ${two.follower.stats.steps}`);
});

t.test('a follower killed mid-way: the restarted one makes the rest, none twice', async (t) => {
  const dbUrl = await testDatabase(t);
  // No follower in the server: the test runs its own on a pool it can kill.
  const server = await startTestServer(t, dbUrl, { ...quiet, flows: false });
  const db = sqlClient(t, dbUrl);
  t.equal(
    (await subscribe(server.url, { name: 's', stream: 'orders', queue: 'q', from: 'earliest' })).status,
    201,
  );
  const N = 3000;
  await sql`select commitfeed.publish('orders', jsonb_build_object('i', g)) from generate_series(1, ${N}) g`.execute(
    db,
  );
  const follower = (appName: string) => {
    const log = { warn: () => {}, error: () => {} };
    // The service's own pool setup (it hears errors of checked-out connections).
    const { db: fdb } = createDatabase({
      url: dbUrl,
      poolSize: 2,
      statementTimeoutMs: 10_000,
      applicationName: appName,
      log,
    });
    const f = new Follower({ db: fdb, feed: server.feed, pageSize: 20, pollIntervalMs: 50, log });
    t.teardown(async () => {
      await f.stop();
      await fdb.destroy();
    });
    return f;
  };
  const first = follower('follower-one');
  first.start();
  await until(async () => (await jobsOf(db, 'q')).length >= 200, 10_000, 'the first follower is under way');
  // Kill its connections while it works (a crash as the database sees it), then stop it for good.
  await sql`select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'follower-one'`.execute(
    db,
  );
  await first.stop();
  const midway = (await jobsOf(db, 'q')).length;
  t.ok(midway < N, `stopped mid-way (${midway} of ${N})`);
  const second = follower('follower-two');
  second.start();
  await until(async () => (await jobsOf(db, 'q')).length >= N, 20_000, 'the second follower finishes');
  await second.pass();
  const jobs = await jobsOf(db, 'q');
  t.equal(jobs.length, N, 'exactly N jobs');
  t.same(
    jobs.map((j) => j.data.i),
    Array.from({ length: N }, (_, i) => i + 1),
    'each event once, in order',
  );
});

t.test('retention overtaking a paused stream subscription: the loss is reported, never silent', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, {
    ...quiet,
    partitionIntervalMs: HOUR,
    retentionMs: HOUR,
  });
  const db = sqlClient(t, dbUrl);
  const sub = await subscribe(server.url, {
    name: 's',
    stream: 'orders',
    type: 'created',
    queue: 'q',
    from: 'earliest',
  });
  t.equal(sub.status, 201);
  t.equal((await api(server.url, 'POST', '/v1/subscriptions/s/pause')).status, 200);
  // Old events (in feed_history, before today): 30 of the followed type, 20 of another, 10 elsewhere.
  await sql`insert into commitfeed.feed (stream, type, data, created_at)
            select case when g <= 50 then 'orders' else 'other' end,
                   case when g <= 30 then 'created' else 'paid' end,
                   to_json(g), '2020-01-01'::timestamptz + g * interval '1 second'
            from generate_series(1, 60) g`.execute(db);
  // A recent event that survives.
  t.equal((await publish(server.url, 'orders', { type: 'created', data: 'kept' })).status, 201);

  const run = await server.janitor.runOnce(new Date(todayUtc() + HOUR));
  t.same(run.dropped, ['feed_history']);
  t.same(run.errors, []);
  t.same(run.lost, [{ subscription: 's', events: 30 }], 'the janitor counts the followed events it dropped');
  t.equal(server.janitor.stats.lostEvents, 30);

  const status = (await api(server.url, 'GET', '/v1/subscriptions/s')).body;
  t.match(status, { lostEvents: 30, lastLoss: { events: 30, partition: 'feed_history' }, paused: true });

  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  t.match(metrics, /commitfeed_subscription_lost_events\{subscription="s"\} 30/, 'in /metrics');

  await api(server.url, 'POST', '/v1/subscriptions/s/resume');
  await until(async () => (await jobsOf(db, 'q')).length === 1, 10_000, 'the surviving event');
  t.same(
    (await jobsOf(db, 'q')).map((j) => j.data),
    ['kept'],
  );
  // A caught-up stream subscription loses nothing to the next drop.
  const again = await server.janitor.runOnce(new Date(todayUtc() + HOUR));
  t.same(again.lost, []);
});
