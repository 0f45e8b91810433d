// Work queues over HTTP against a real PostgreSQL: retries and dead letters, dedup, pause, stats and
// the SSE watch of queue activity.
import { sql } from 'kysely';
import t from 'tap';
import { openSse, sleep, sqlClient, startTestServer, testDatabase, within } from './helpers.ts';
import { ack, api, claim, enqueue, jobRows, nack, stats, timed, until } from './queue-helpers.ts';

t.test('nack: backoff, dead letter after maxAttempts with the last error, redrive', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { pollIntervalMs: 60000 });
  const e = await enqueue(server.url, 'n', {
    payload: 'flaky',
    maxAttempts: 3,
    backoff: { type: 'fixed', delay: 1.5, jitter: false },
  });
  let runAt = 0;
  for (let attempt = 1; attempt <= 3; attempt++) {
    const [job] = await claim(server.url, 'n', { wait: 10 });
    t.equal(job.id, e.body.id);
    t.equal(job.attempt, attempt);
    // Same host, same clock: the server's run_at is comparable with Date.now() (50 ms tolerance).
    if (attempt > 1)
      t.ok(Date.now() >= runAt - 50, `retried after the backoff (${Date.now() - runAt} ms after)`);
    const nackedAt = Date.now();
    const res = await nack(server.url, 'n', job.id, { lease: job.lease, error: `boom ${attempt}` });
    t.equal(res.status, 200);
    if (attempt < 3) {
      t.match(res.body, { state: 'ready', attempt });
      runAt = Date.parse(res.body.runAt);
      const due = runAt - nackedAt;
      t.ok(due >= 1450 && runAt - Date.now() <= 1550, `runAt is the fixed backoff (${due} ms)`);
      if (Date.now() < runAt - 200)
        t.same(await claim(server.url, 'n'), [], 'not handed out before its backoff');
    } else {
      t.match(res.body, { state: 'dead', attempt: 3 });
    }
  }
  t.match(await stats(server.url, 'n'), { ready: 0, delayed: 0, dead: 1 });
  t.same(await claim(server.url, 'n'), [], 'dead jobs are not handed out');
  const dead = await api(server.url, 'GET', '/v1/queues/n/dead');
  t.equal(dead.status, 200);
  t.match(dead.body.jobs, [
    { id: e.body.id, payload: 'flaky', attempt: 3, maxAttempts: 3, lastError: 'boom 3' },
  ]);
  t.equal(dead.body.next, e.body.id);
  t.same((await api(server.url, 'GET', `/v1/queues/n/dead?after=${e.body.id}`)).body.jobs, []);

  // Redrive one: it is claimable at once with fresh attempts.
  const waiting = claim(server.url, 'n', { wait: 10 });
  await sleep(100);
  const r = await api(server.url, 'POST', `/v1/queues/n/dead/${e.body.id}/retry`);
  t.equal(r.status, 200);
  const [again] = await waiting;
  t.match(again, { id: e.body.id, attempt: 1 }, 'a waiting claim is woken by the redrive');
  const missing = await api(server.url, 'POST', `/v1/queues/n/dead/${e.body.id}/retry`);
  t.equal(missing.status, 404, 'a job that is not dead cannot be redriven');
  t.equal(missing.body.code, 'job_not_found');

  // Exponential backoff (no jitter): delay * 2^(attempt-1), capped; an explicit delay wins.
  await enqueue(server.url, 'exp', { payload: 1, backoff: { delay: 10, max: 15, jitter: false } });
  let [j] = await claim(server.url, 'exp');
  let res = await nack(server.url, 'exp', j.id, { lease: j.lease });
  t.ok(Math.abs(Date.parse(res.body.runAt) - Date.now() - 10000) < 1000, 'attempt 1: 10 s');
  await sql`update commitfeed.jobs set run_at = now()`.execute(sqlClient(t, dbUrl));
  [j] = await claim(server.url, 'exp');
  res = await nack(server.url, 'exp', j.id, { lease: j.lease });
  t.ok(Math.abs(Date.parse(res.body.runAt) - Date.now() - 15000) < 1000, 'attempt 2: 20 s capped at 15');
  await sql`update commitfeed.jobs set run_at = now()`.execute(sqlClient(t, dbUrl));
  [j] = await claim(server.url, 'exp');
  res = await nack(server.url, 'exp', j.id, { lease: j.lease, delay: 0 });
  t.ok(Date.parse(res.body.runAt) - Date.now() < 500, 'explicit delay 0: at once');
  t.equal((await claim(server.url, 'exp')).length, 1);

  // Redrive all.
  await enqueue(server.url, 'd', [
    { payload: 1, maxAttempts: 1 },
    { payload: 2, maxAttempts: 1 },
  ]);
  for (const job of await claim(server.url, 'd', { max: 2 }))
    await nack(server.url, 'd', job.id, { lease: job.lease });
  t.match(await stats(server.url, 'd'), { dead: 2 });
  const all = await api(server.url, 'POST', '/v1/queues/d/dead/retry');
  t.same(all.body, { retried: 2 });
  t.match(await stats(server.url, 'd'), { dead: 0, ready: 2 });
});

t.test('a lease that expires on the last attempt dead-letters the job', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const e = await enqueue(server.url, 'z', { payload: 0, maxAttempts: 1 });
  await claim(server.url, 'z', { lease: 0.2 });
  await sleep(300);
  t.same(await claim(server.url, 'z'), []);
  t.match(await stats(server.url, 'z'), { dead: 1, ready: 0, leased: 0 });
  const dead = await api(server.url, 'GET', '/v1/queues/z/dead');
  t.match(dead.body.jobs, [{ id: e.body.id, lastError: 'lease expired', attempt: 1 }]);
});

t.test('key dedup: concurrent enqueues with one key create one job', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl);
  const db = sqlClient(t, dbUrl);
  const results = await Promise.all(
    Array.from({ length: 20 }, (_, i) => enqueue(server.url, 'k', { payload: i, key: 'order-1' })),
  );
  const ids = new Set(results.map((r) => r.body.id));
  t.equal(ids.size, 1, 'one id for every request');
  t.equal(results.filter((r) => r.status === 201 && !r.body.duplicate).length, 1, 'one was enqueued');
  t.equal(results.filter((r) => r.status === 200 && r.body.duplicate).length, 19, 'the rest are duplicates');
  // Within one batch too, and across keys.
  const batch = await enqueue(server.url, 'k', [
    { payload: 'a', key: 'order-1' },
    { payload: 'b', key: 'order-2' },
    { payload: 'c', key: 'order-2' },
  ]);
  t.match(batch.body.jobs, [
    { id: [...ids][0], duplicate: true },
    { duplicate: false },
    { id: batch.body.jobs[1].id, duplicate: true },
  ]);
  t.equal((await jobRows(db)).length, 2);
  // The same key in another queue is another job; once completed, the key is free again.
  t.equal((await enqueue(server.url, 'k2', { payload: 0, key: 'order-1' })).status, 201);
  const jobs = await claim(server.url, 'k', { max: 10 });
  for (const j of jobs) await ack(server.url, 'k', j.id, j.lease);
  const again = await enqueue(server.url, 'k', { payload: 'again', key: 'order-1' });
  t.equal(again.status, 201);
  t.notOk(ids.has(again.body.id), 'a new job');
});

t.test('pause and resume', async (t) => {
  const server = await startTestServer(t, await testDatabase(t), { pollIntervalMs: 60000 });
  t.equal((await enqueue(server.url, 'pq', { payload: 1 })).status, 201);
  t.same((await api(server.url, 'POST', '/v1/queues/pq/pause')).body, { queue: 'pq', paused: true });
  t.equal((await enqueue(server.url, 'pq', { payload: 2 })).status, 201, 'a paused queue accepts jobs');
  const claimBody = async (body: object) => (await api(server.url, 'POST', '/v1/queues/pq/claim', body)).body;
  // An empty answer says the queue is paused, told apart from an empty queue's `{"jobs":[]}`.
  t.same(await claimBody({}), { jobs: [], paused: true }, 'and hands none out, saying it is paused');
  t.match(await stats(server.url, 'pq'), { paused: true, ready: 2 });
  const started = Date.now();
  t.same(await claimBody({ wait: 0.5 }), { jobs: [], paused: true }, 'a long-poll that ran out: paused');
  t.ok(Date.now() - started >= 450, 'after its whole wait (a resume could still come)');
  const waiting = timed(claim(server.url, 'pq', { wait: 10 }));
  await sleep(300);
  t.notOk(waiting.settled(), 'a waiting claim keeps waiting while paused');
  const resumedAt = Date.now();
  t.same((await api(server.url, 'POST', '/v1/queues/pq/resume')).body, { queue: 'pq', paused: false });
  const got = await waiting;
  t.equal(got.value.length, 1, 'resume wakes the waiting claim');
  t.ok(got.at - resumedAt < 2000);
  const second = await claimBody({});
  t.same([Object.keys(second), second.jobs.length], [['jobs'], 1], 'no `paused` once resumed');
  t.same(await claimBody({}), { jobs: [] }, 'nor on an empty queue');
});

t.test('stats and the queue list', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const missing = await api(server.url, 'GET', '/v1/queues/nothing-here');
  t.equal(missing.status, 404);
  t.equal(missing.body.code, 'queue_not_found');
  await enqueue(server.url, 's1', [
    { payload: 1 },
    { payload: 2 },
    { payload: 3 },
    { payload: 4, delay: 600 },
    { payload: 5, maxAttempts: 1 },
  ]);
  await enqueue(server.url, 's2', { payload: 0 });
  const [first] = await claim(server.url, 's1');
  await ack(server.url, 's1', first.id, first.lease);
  const [second] = await claim(server.url, 's1');
  t.equal(second.payload, 2);
  await until(async () => (await stats(server.url, 's1')).oldestReadyAgeSeconds > 0.05, 5000, 'age to grow');
  const s = await stats(server.url, 's1');
  t.match(s, { name: 's1', paused: false, ready: 2, delayed: 1, leased: 1, dead: 0, completed: 1 });
  t.ok(s.oldestReadyAgeSeconds > 0.05 && s.oldestReadyAgeSeconds < 60, 'oldest ready age in seconds');
  const list = await api(server.url, 'GET', '/v1/queues');
  t.same(
    list.body.queues.map((q: { name: string; ready: number }) => [q.name, q.ready]),
    [
      ['s1', 2],
      ['s2', 1],
    ],
  );
});

t.test('queue activity can be watched over SSE', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const sse = await openSse(t, `${server.url}/v1/queues/w/events`);
  t.equal(sse.status, 200);
  const e = await enqueue(server.url, 'w', [{ payload: 1, maxAttempts: 1 }, { payload: 2 }]);
  await enqueue(server.url, 'other', { payload: 0 });
  const [job] = await claim(server.url, 'w');
  await nack(server.url, 'w', job.id, { lease: job.lease, error: 'no' });
  const got = await sse.waitFor(2);
  t.same(
    got.map((m) => [m.event, JSON.parse(m.data ?? 'null')]),
    [
      ['enqueued', { jobs: 2 }],
      ['dead', { id: e.body.jobs[0].id }],
    ],
  );
  const resumed = await openSse(t, `${server.url}/v1/queues/w/events`, { 'last-event-id': got[0].id! });
  t.same(
    (await resumed.waitFor(1)).map((m) => m.event),
    ['dead'],
    'resumes after Last-Event-ID',
  );
});

t.test('queue activity is SSE only: a request that does not take SSE is a 406, not a stream', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  for (const accept of [undefined, 'application/json', '*/*']) {
    const res = await within(
      fetch(`${server.url}/v1/queues/w/events`, { headers: accept ? { accept } : {} }),
      5000,
      `the answer to accept ${accept}`,
    );
    t.equal(res.status, 406, `accept ${accept}: 406`);
    t.match(await within(res.json(), 5000, 'its body'), { statusCode: 406, code: 'sse_only' });
  }
  t.equal(server.feed.hub.subscriberCount, 0, 'no subscriber was made');
});
