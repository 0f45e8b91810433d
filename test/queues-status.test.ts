// Job status and results: GET a job through its life, results stored with the ack (bounded), cancel
// (refused while a worker holds the job), completed jobs kept for JOB_RETENTION and then trimmed by
// the janitor, and a group given through SQL and /v1/tx.
import { sql } from 'kysely';
import t from 'tap';
import { sqlClient, startTestServer, testDatabase } from './helpers.ts';
import { ack, api, claim, enqueue, jobRows, nack } from './queue-helpers.ts';

const job = (base: string, q: string, id: string) => api(base, 'GET', `/v1/queues/${q}/jobs/${id}`);
const cancel = (base: string, q: string, id: string) =>
  api(base, 'POST', `/v1/queues/${q}/jobs/${id}/cancel`);

t.test('GET a job: ready, leased, retried with its error, completed with its result', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { maxJobResultBytes: 100 });
  const q = 'reports';
  const e = await enqueue(server.url, q, { payload: { r: 1 }, key: 'k1', group: 'g', maxAttempts: 3 });
  const id = e.body.id;
  t.match((await job(server.url, q, id)).body, {
    id,
    queue: q,
    state: 'ready',
    payload: { r: 1 },
    result: null,
    group: 'g',
    key: 'k1',
    attempt: 0,
    maxAttempts: 3,
    lastError: null,
    finishedAt: null,
  });
  const [c1] = await claim(server.url, q, { lease: 30 });
  t.match((await job(server.url, q, id)).body, { state: 'leased', attempt: 1, leaseExpiresAt: /^\d{4}-/ });
  await nack(server.url, q, id, { lease: c1.lease, error: 'disk full', delay: 60 });
  t.match((await job(server.url, q, id)).body, { state: 'delayed', attempt: 1, lastError: 'disk full' });
  await sql`update commitfeed.jobs set run_at = clock_timestamp() where id = ${id}::int8`.execute(
    sqlClient(t, dbUrl),
  );
  const [c2] = await claim(server.url, q);

  // A result over MAX_JOB_RESULT_BYTES: 413, and the job is not acked.
  const big = await api(server.url, 'POST', `/v1/queues/${q}/jobs/${id}/ack`, {
    lease: c2.lease,
    result: 'x'.repeat(200),
  });
  t.equal(big.status, 413);
  t.equal(big.body.code, 'result_too_large');
  t.equal((await job(server.url, q, id)).body.state, 'leased', 'nothing acked');

  const ok = await api(server.url, 'POST', `/v1/queues/${q}/jobs/${id}/ack`, {
    lease: c2.lease,
    result: { rows: 42, note: 'ok' },
  });
  t.equal(ok.status, 204);
  const done = (await job(server.url, q, id)).body;
  t.match(done, { state: 'completed', attempt: 2, result: { rows: 42, note: 'ok' }, finishedAt: /^\d{4}-/ });
  // The key is free again once its job finished.
  t.match((await enqueue(server.url, q, { payload: 2, key: 'k1' })).body, { duplicate: false });

  t.equal((await job(server.url, q, '999999')).status, 404);
  t.equal((await job(server.url, q, '999999')).body.code, 'job_not_found');
  t.equal((await job(server.url, q, 'abc')).body.code, 'invalid_id');
  t.equal((await job(server.url, 'other', id)).status, 404, 'a job is found only in its own queue');
});

t.test(
  'cancel: a ready or dead job is cancelled; a leased one is refused (409 job_leased); a cancelled head lets its group go',
  async (t) => {
    const dbUrl = await testDatabase(t);
    const server = await startTestServer(t, dbUrl);
    const q = 'c';
    const [a, b, held] = (
      await enqueue(server.url, q, [
        { payload: 'a', group: 'g' },
        { payload: 'b', group: 'g' },
        { payload: 'held', key: 'h' },
      ])
    ).body.jobs.map((j: { id: string }) => j.id);
    // Claims the head of g ('a') and 'held'.
    const claimed = await claim(server.url, q, { max: 10 });
    t.same(claimed.map((j) => j.payload).sort(), ['a', 'held']);
    const leased = await cancel(server.url, q, held);
    t.equal(leased.status, 409);
    t.equal(leased.body.code, 'job_leased');
    t.equal((await job(server.url, q, held)).body.state, 'leased', 'nothing changed');

    // 'b' waits behind 'a'; cancelling 'b' while 'a' runs, then acking 'a', leaves nothing.
    t.same((await cancel(server.url, q, b)).body, { id: b, state: 'cancelled' });
    t.equal((await job(server.url, q, b)).body.state, 'cancelled');
    const again = await cancel(server.url, q, b);
    t.equal(again.status, 409);
    t.equal(again.body.code, 'job_cancelled');
    const ja = claimed.find((j) => j.id === a)!;
    t.equal((await ack(server.url, q, a, ja.lease)).status, 204);
    t.equal((await cancel(server.url, q, a)).body.code, 'job_completed');
    t.same(await claim(server.url, q), [], 'a cancelled job is never handed out');
    t.equal((await cancel(server.url, q, '424242')).status, 404);

    // A cancelled head of a group lets the next one go.
    const [d1, d2] = (
      await enqueue(server.url, q, [
        { payload: 'd1', group: 'h' },
        { payload: 'd2', group: 'h' },
      ])
    ).body.jobs.map((j: { id: string }) => j.id);
    t.equal((await cancel(server.url, q, d1)).status, 200);
    const next = await claim(server.url, q, { max: 10 });
    t.same(
      next.map((j) => j.id),
      [d2],
    );
  },
);

t.test('completed and cancelled jobs stay for JOB_RETENTION, then the janitor deletes them', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { janitorIntervalMs: 0, jobRetentionMs: 60_000 });
  const db = sqlClient(t, dbUrl);
  const q = 'r';
  const ids = (await enqueue(server.url, q, [{ payload: 1 }, { payload: 2 }, { payload: 3 }])).body.jobs.map(
    (j: { id: string }) => j.id,
  );
  const [c] = await claim(server.url, q);
  await ack(server.url, q, c.id, c.lease);
  await cancel(server.url, q, ids[2]);
  let run = await server.janitor.runOnce(new Date(Date.now() + 30_000));
  t.equal(run.trimmed.finishedJobs, 0, 'within the retention: kept');
  run = await server.janitor.runOnce(new Date(Date.now() + 61_000));
  t.equal(run.trimmed.finishedJobs, 2, 'past it: the completed and the cancelled job are deleted');
  t.same(
    (await jobRows(db)).map((r) => [r.id, r.state]),
    [[ids[1], 'ready']],
    'the ready job stays',
  );
  t.equal((await job(server.url, q, c.id)).status, 404);
});

t.test('a group given through commitfeed.enqueue and /v1/tx is kept like one given over HTTP', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl);
  const db = sqlClient(t, dbUrl);
  const { rows } = await sql<{ id: string }>`
    select commitfeed.enqueue('sq', '{"n":1}'::jsonb, group_key => 'acct-1')::text as id`.execute(db);
  t.equal((await job(server.url, 'sq', rows[0].id)).body.group, 'acct-1');
  const res = await api(server.url, 'POST', '/v1/tx', {
    ops: [{ enqueue: { queue: 'sq', payload: { n: 2 }, group: 'acct-1' } }],
  });
  t.equal(res.status, 200);
  const id = res.body.results[0].enqueue.id;
  t.equal((await job(server.url, 'sq', id)).body.group, 'acct-1');
  t.same(
    (await claim(server.url, 'sq', { max: 10 })).map((j) => j.payload),
    [{ n: 1 }],
    'one at a time across both',
  );
  const badTx = await api(server.url, 'POST', '/v1/tx', {
    ops: [{ enqueue: { queue: 'sq', payload: 1, group: '' } }],
  });
  t.equal(badTx.status, 400);
  await t.rejects(
    sql`select commitfeed.enqueue('sq', '1'::jsonb, group_key => '')`.execute(db),
    /group must be a string of 1-200 characters/,
  );
});
