// Work queues over HTTP against a real PostgreSQL: enqueue → claim → ack, long-poll woken at commit
// (and not by a rollback), delayed jobs, priority, fenced leases and lease expiry.
import { sql } from 'kysely';
import t from 'tap';
import { enqueueJobs } from '../src/queues/enqueue.ts';
import { toJobInput } from '../src/queues/validate.ts';
import { feedRows, sleep, sqlClient, startTestServer, testDatabase } from './helpers.ts';
import { ack, api, claim, enqueue, jobRows, nack, stats, timed } from './queue-helpers.ts';

t.test('enqueue → claim → ack', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl);
  const db = sqlClient(t, dbUrl);
  const e = await enqueue(server.url, 'emails', { payload: { to: 'a@example.com', n: [1, 2] } });
  t.equal(e.status, 201);
  t.match(e.body, { id: /^\d+$/, duplicate: false });

  const [job, ...rest] = await claim(server.url, 'emails', { lease: 10 });
  t.same(rest, []);
  t.equal(job.id, e.body.id);
  t.same(job.payload, { to: 'a@example.com', n: [1, 2] }, 'payload as enqueued');
  t.equal(job.attempt, 1);
  t.equal(job.maxAttempts, 5);
  t.match(job.lease, /^[0-9a-f-]{36}$/);
  const expires = Date.parse(job.leaseExpiresAt) - Date.now();
  t.ok(expires > 8000 && expires <= 10500, `lease expires in about 10 s (${expires} ms)`);
  t.same(await claim(server.url, 'emails'), [], 'a leased job is not handed out twice');

  const a = await ack(server.url, 'emails', job.id, job.lease);
  t.equal(a.status, 204);
  t.same(
    (await jobRows(db)).map((r) => r.state),
    ['completed'],
    'an acked job stays readable as completed (until JOB_RETENTION)',
  );
  t.match(await stats(server.url, 'emails'), { ready: 0, leased: 0, completed: 1 });
  const again = await ack(server.url, 'emails', job.id, job.lease);
  t.equal(again.status, 409);
  t.equal(again.body.code, 'job_completed');

  // Batch enqueue: ids in order; batch ack: one result per item.
  const b = await enqueue(server.url, 'emails', [{ payload: 1 }, { payload: 2 }, { payload: 3 }]);
  t.equal(b.status, 201);
  const ids = b.body.jobs.map((j: { id: string }) => j.id);
  t.equal(ids.length, 3);
  const jobs = await claim(server.url, 'emails', { max: 10 });
  t.same(
    jobs.map((j) => j.id),
    ids,
    'claimed in enqueue order',
  );
  t.same(
    jobs.map((j) => j.payload),
    [1, 2, 3],
  );
  const settled = await api(server.url, 'POST', '/v1/queues/emails/ack', [
    { id: jobs[0].id, lease: jobs[0].lease },
    { id: jobs[1].id, lease: jobs[0].lease },
    { id: '999999', lease: jobs[2].lease },
    { id: jobs[2].id, lease: jobs[2].lease },
  ]);
  t.equal(settled.status, 200);
  t.match(settled.body.results, [
    { id: jobs[0].id, ok: true },
    { id: jobs[1].id, ok: false, status: 409, code: 'lease_mismatch' },
    { id: '999999', ok: false, status: 404, code: 'job_not_found' },
    { id: jobs[2].id, ok: true },
  ]);
  t.same(
    (await jobRows(db)).filter((r) => r.state !== 'completed').map((r) => [r.id, r.state]),
    [[jobs[1].id, 'leased']],
    'the failed item changed nothing',
  );
  t.match(await stats(server.url, 'emails'), { completed: 3, leased: 1 });
});

t.test(
  'a claim carrying `ack` settles the last batch first, then claims; one result per ack item',
  async (t) => {
    const dbUrl = await testDatabase(t);
    const server = await startTestServer(t, dbUrl);
    const db = sqlClient(t, dbUrl);
    await enqueue(server.url, 'w', [{ payload: 1 }, { payload: 2 }, { payload: 3 }, { payload: 4 }]);
    const first = await claim(server.url, 'w', { max: 2 });
    t.same(
      first.map((j) => j.payload),
      [1, 2],
    );

    const next = await api(server.url, 'POST', '/v1/queues/w/claim', {
      max: 2,
      ack: [
        { id: first[0].id, lease: first[0].lease, result: { sent: true } },
        { id: first[1].id, lease: 'not-the-lease' },
        { id: '999999', lease: first[1].lease },
      ],
    });
    t.equal(next.status, 200);
    t.match(next.body.acked, [
      { id: first[0].id, ok: true },
      { id: first[1].id, ok: false, status: 409, code: 'lease_mismatch' },
      { id: '999999', ok: false, status: 404, code: 'job_not_found' },
    ]);
    t.same(
      next.body.jobs.map((j: { payload: number }) => j.payload),
      [3, 4],
      'a failed ack does not stop the claim',
    );
    const rows = await sql<{ id: string; state: string; result: unknown }>`
    select id::text as id, state, result from commitfeed.jobs order by id`.execute(db);
    t.same(
      rows.rows.map((r) => [r.id, r.state, r.result]),
      [
        [first[0].id, 'completed', { sent: true }],
        [first[1].id, 'leased', null],
        [next.body.jobs[0].id, 'leased', null],
        [next.body.jobs[1].id, 'leased', null],
      ],
    );

    // Without `ack`, or with an empty one, the answer has no "acked".
    const plain = await api(server.url, 'POST', '/v1/queues/w/claim', { ack: [] });
    t.same(plain.body, { jobs: [] });

    // An oversized result refuses the whole request before anything is acked or claimed.
    await enqueue(server.url, 'w', { payload: 5 });
    const big = await api(server.url, 'POST', '/v1/queues/w/claim', {
      ack: [{ id: first[1].id, lease: first[1].lease, result: 'x'.repeat(70_000) }],
    });
    t.equal(big.status, 413);
    t.equal(big.body.code, 'result_too_large');
    t.match(big.body.message, /ack\[0\]\.result/);
    t.match(await stats(server.url, 'w'), { ready: 1, leased: 3, completed: 1 }, 'nothing acked or claimed');
    const bad = await api(server.url, 'POST', '/v1/queues/w/claim', { ack: [{ id: 'x', lease: 'y' }] });
    t.equal(bad.status, 400);
  },
);

t.test('a waiting claim is woken at the enqueue commit, and not by a rolled-back enqueue', async (t) => {
  const dbUrl = await testDatabase(t);
  // A fallback poll of a minute: only the NOTIFY at commit can wake the claim in time.
  const server = await startTestServer(t, dbUrl, { pollIntervalMs: 60000 });
  const db = sqlClient(t, dbUrl);
  const job = (payload: unknown) => toJobInput('work', { payload }, 1 << 20);

  // Rolled back: nothing is created, nobody wakes, the claim runs out its wait empty.
  const start = Date.now();
  const waitingEmpty = timed(claim(server.url, 'work', { wait: 1.5 }));
  await sleep(100);
  await db
    .transaction()
    .execute(async (trx) => {
      await enqueueJobs(trx, [job('ghost')]);
      throw new Error('roll back');
    })
    .catch(() => {});
  const empty = await waitingEmpty;
  t.same(empty.value, [], 'a rolled-back enqueue hands out nothing');
  t.ok(empty.at - start >= 1400, `the claim waited out its time (${empty.at - start} ms)`);
  t.same(await jobRows(db), [], 'no job row');
  t.same(await feedRows(db), [], 'no feed row');

  // Committed: the claim returns at the commit, not before.
  const waiting = timed(claim(server.url, 'work', { wait: 20 }));
  await sleep(100);
  let committedAt = 0;
  await db.transaction().execute(async (trx) => {
    await enqueueJobs(trx, [job('hello')]);
    await sleep(400);
    t.notOk(waiting.settled(), 'not handed out before the commit');
  });
  committedAt = Date.now();
  const got = await waiting;
  t.same(
    got.value.map((j) => j.payload),
    ['hello'],
  );
  t.ok(got.at - committedAt < 2000, `woken at the commit (${got.at - committedAt} ms after)`);
  const rows = await feedRows(db);
  t.same(
    rows.map((r) => [r.stream, r.data]),
    [['queue/work', { jobs: 1 }]],
    'one small wake-up row in the feed',
  );
});

t.test('delayed jobs are not handed out early, and wake a waiting claim when due', async (t) => {
  const server = await startTestServer(t, await testDatabase(t), { pollIntervalMs: 60000 });
  const waiting = timed(claim(server.url, 'later', { wait: 10 }));
  await sleep(100);
  const enqueuedAt = Date.now();
  const e = await enqueue(server.url, 'later', { payload: 'soon', delay: 1 });
  t.equal(e.status, 201);
  t.same(await claim(server.url, 'later'), [], 'not claimable before its delay');
  t.match(await stats(server.url, 'later'), { ready: 0, delayed: 1 });
  const got = await waiting;
  t.same(
    got.value.map((j) => j.id),
    [e.body.id],
  );
  const after = got.at - enqueuedAt;
  t.ok(after >= 950 && after < 2000, `handed out when due (${after} ms after enqueue)`);

  // runAt in the past runs at once; runAt in the future waits.
  const past = await enqueue(server.url, 'later', {
    payload: 'past',
    runAt: new Date(Date.now() - 60000).toISOString(),
  });
  t.same(
    (await claim(server.url, 'later')).map((j) => j.id),
    [past.body.id],
  );
  await enqueue(server.url, 'later', {
    payload: 'future',
    runAt: new Date(Date.now() + 3600000).toISOString(),
  });
  t.same(await claim(server.url, 'later'), []);
});

t.test('priority order, then age', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const e = await enqueue(server.url, 'p', [
    { payload: 'a', priority: 5 },
    { payload: 'b', priority: -1 },
    { payload: 'c' },
    { payload: 'd', priority: -1 },
    { payload: 'e', priority: 3 },
  ]);
  t.equal(e.status, 201);
  const jobs = await claim(server.url, 'p', { max: 10 });
  t.same(
    jobs.map((j) => j.payload),
    ['b', 'd', 'c', 'e', 'a'],
  );
});

t.test(
  'lease expiry: re-delivery with attempt + 1; the stale lease gets 409 and changes nothing',
  async (t) => {
    const dbUrl = await testDatabase(t);
    const server = await startTestServer(t, dbUrl, { pollIntervalMs: 60000 });
    const db = sqlClient(t, dbUrl);
    await enqueue(server.url, 'l', { payload: 'x' });
    const [first] = await claim(server.url, 'l', { lease: 0.5 });
    t.equal(first.attempt, 1);
    // A second worker waits; the first "crashes". The waiter wakes when the lease runs out.
    const start = Date.now();
    const [second] = await claim(server.url, 'l', { wait: 10, lease: 30 });
    const took = Date.now() - start;
    t.equal(second.id, first.id);
    t.equal(second.attempt, 2, 'the expired attempt counts');
    t.not(second.lease, first.lease, 'a fresh lease token');
    t.ok(took >= 300 && took < 2500, `re-delivered at lease expiry (${took} ms)`);

    for (const [what, res] of [
      ['ack', await ack(server.url, 'l', first.id, first.lease)],
      ['nack', await nack(server.url, 'l', first.id, { lease: first.lease, error: 'stale' })],
      [
        'extend',
        await api(server.url, 'POST', `/v1/queues/l/jobs/${first.id}/extend`, {
          lease: first.lease,
          seconds: 60,
        }),
      ],
    ] as const) {
      t.equal(res.status, 409, `stale ${what}: 409`);
      t.equal(res.body.code, 'lease_mismatch', `stale ${what}: code`);
    }
    const [row] = await jobRows(db);
    t.match(row, { id: second.id, state: 'leased', attempt: 2 }, 'the job stays with its new holder');
    t.equal((await ack(server.url, 'l', second.id, second.lease)).status, 204);
  },
);

t.test('an expired lease is refused (409 lease_expired) and extend keeps a lease alive', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  await enqueue(server.url, 'x', [{ payload: 1 }, { payload: 2 }]);
  const [a, b] = await claim(server.url, 'x', { max: 2, lease: 0.3 });
  const ext = await api(server.url, 'POST', `/v1/queues/x/jobs/${b.id}/extend`, {
    lease: b.lease,
    seconds: 30,
  });
  t.equal(ext.status, 200);
  t.ok(Date.parse(ext.body.leaseExpiresAt) - Date.now() > 25000, 'extended to 30 s from now');
  await sleep(500);
  const late = await ack(server.url, 'x', a.id, a.lease);
  t.equal(late.status, 409);
  t.equal(late.body.code, 'lease_expired');
  t.match(late.body.message, /expired/);
  t.equal((await ack(server.url, 'x', b.id, b.lease)).status, 204, 'the extended lease still holds');
});
