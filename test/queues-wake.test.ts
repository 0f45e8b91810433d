// Waking waiting claims: an enqueue wakes as many waiters as it has jobs (not every waiter), and no
// job is ever stranded while a claim waits — many waiters, many jobs, several replicas enqueueing at
// once, rolled-back enqueues, and a woken claim that leaves before using its wake-up.
import { sql } from 'kysely';
import t from 'tap';
import { toJobInput } from '../src/queues/validate.ts';
import { sqlClient, startTestServer, testDatabase, until, within } from './helpers.ts';
import { ack, claim, enqueue } from './queue-helpers.ts';

// Claims wait far longer than any `until` below: a job found only when a wait ran out fails the test.
const WAIT = 25;

t.test(
  'one job goes to one of 16 waiting claims, handed off by its enqueue; the others sleep on',
  async (t) => {
    const dbUrl = await testDatabase(t);
    const server = await startTestServer(t, dbUrl);
    const db = sqlClient(t, dbUrl);
    const { wakeups } = server.queues;
    const got: string[] = [];
    const claims = Array.from({ length: 16 }, () =>
      claim(server.url, 'solo', { max: 1, wait: WAIT, lease: 40 }).then((jobs) => {
        for (const j of jobs) got.push(j.id);
        return jobs;
      }),
    );
    await until(() => wakeups.size === 16, 10000, '16 waiting claims');
    const woken = wakeups.woken;
    const handed = wakeups.handedOff;
    const res = await enqueue(server.url, 'solo', { payload: 1 });
    await until(() => got.length === 1, 5000, 'the job to be claimed');
    t.same(got, [res.body.id], 'the job went to one claim');
    t.equal(wakeups.size, 15, 'the other claims wait on');
    t.equal(wakeups.handedOff - handed, 1, 'handed off by the enqueue');
    t.equal(wakeups.woken - woken, 0, 'nobody was woken to run a claim statement');
    const [row] = (
      await sql<{ state: string; attempt: number; lease_s: number }>`
      select state, attempt, extract(epoch from lease_expires_at - created_at)::float8 as lease_s
      from commitfeed.jobs where id = ${res.body.id}`.execute(db)
    ).rows;
    t.match(row, { state: 'leased', attempt: 1 }, 'leased by the enqueue, first attempt');
    t.ok(row.lease_s > 39 && row.lease_s < 41, `leased for the claim's 40 s (${row.lease_s})`);
    const { rows: wakeRows } = await sql`select 1 from commitfeed.feed where stream = 'queue/solo'`.execute(
      db,
    );
    t.equal(wakeRows.length, 0, 'a job handed off writes no wake-up row (and sends no notify)');
    // Release the rest: 15 jobs in one enqueue go to the 15 waiters.
    await enqueue(
      server.url,
      'solo',
      Array.from({ length: 15 }, (_, i) => ({ payload: i })),
    );
    await Promise.all(claims);
    t.equal(got.length, 16, 'every claim got one job');
    t.equal(new Set(got).size, 16, 'no job twice');
    t.equal(wakeups.handedOff - handed, 16, 'each handed off');
  },
);

t.test(
  'no hand-off where a claim would not hand the job out: paused, limited, grouped, delayed',
  async (t) => {
    const dbUrl = await testDatabase(t);
    const server = await startTestServer(t, dbUrl, { pollIntervalMs: 60000 });
    const db = sqlClient(t, dbUrl);
    const { queues } = server;
    const handed = queues.wakeups.handedOff;
    const waiting = (queue: string) =>
      queues
        .claim(queue, { max: 5, leaseSeconds: 30, waitSeconds: WAIT }, new AbortController().signal)
        .then((r) => r.jobs);
    const states = async (queue: string) =>
      (
        await sql<{
          state: string;
        }>`select state from commitfeed.jobs where queue = ${queue} order by id`.execute(db)
      ).rows.map((r) => r.state);

    // Paused: the job stays ready and the claim keeps waiting; resume hands it out. (A queue is made
    // by its first enqueue or setting: pausing an unknown one changes nothing.)
    await queues.setConcurrency('p', null);
    t.ok(await queues.setPaused('p', true));
    const p = waiting('p');
    await until(() => queues.wakeups.size === 1, 5000, 'a claim waiting on the paused queue');
    await enqueue(server.url, 'p', { payload: 1 });
    t.same(await states('p'), ['ready'], 'paused: not leased');
    await until(() => queues.wakeups.size === 1, 5000, 'the claim to wait again');
    await queues.setPaused('p', false);
    t.equal((await within(p, 5000, 'the resumed queue to hand the job out')).length, 1);

    // A concurrency limit: the claim statement decides (under the queue's lock), not the enqueue.
    await queues.setConcurrency('lim', 1);
    const l = waiting('lim');
    await until(() => queues.wakeups.size === 1, 5000, 'a claim waiting on the limited queue');
    await enqueue(server.url, 'lim', { payload: 1 });
    t.equal(
      (await within(l, 5000, 'the limited queue to hand the job out')).length,
      1,
      'claimed by a statement',
    );
    t.same(await states('lim'), ['leased']);

    // Grouped and delayed jobs are never handed off; a duplicate key adds nothing to hand off.
    const g = waiting('g');
    await until(() => queues.wakeups.size === 1, 5000, 'a claim waiting on g');
    await enqueue(server.url, 'g', [
      { payload: 1, group: 'a' },
      { payload: 2, delay: 60 },
    ]);
    const gj = await within(g, 5000, 'the grouped job to be claimed');
    t.same(
      gj.map((j) => j.payload),
      ['1'],
      'the grouped job, claimed by a statement; the delayed one not yet',
    );
    t.equal(queues.wakeups.handedOff - handed, 0, 'nothing was handed off');
  },
);

t.test('a job handed to a claim whose client left goes back to the queue, attempt uncounted', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { pollIntervalMs: 60000 });
  const db = sqlClient(t, dbUrl);
  const { queues } = server;
  const gone = new AbortController();
  const a = queues
    .claim('back', { max: 1, leaseSeconds: 30, waitSeconds: WAIT }, gone.signal)
    .then((r) => r.jobs);
  await until(() => queues.wakeups.size === 1, 5000, 'the claim to wait');
  // The enqueue reserves the waiting claim as it starts writing (synchronously); the client leaves
  // before the commit, so the handed-off job must come back.
  const enqueued = queues.enqueue([toJobInput('back', { payload: 'x' }, 1000)]);
  gone.abort();
  const [job] = await enqueued;
  t.same(await a, [], 'the claim that left returns nothing');
  t.equal(queues.wakeups.handedOff, 1, 'the job had been handed off');
  const [row] = (
    await sql<{ state: string; attempt: number; lease: string | null }>`
      select state, attempt, lease::text as lease from commitfeed.jobs where id = ${job.id}`.execute(db)
  ).rows;
  t.same(row, { state: 'ready', attempt: 0, lease: null }, 'ready again, its attempt not counted');
  const { rows } = await sql<{ type: string }>`
    select type from commitfeed.feed where stream = 'queue/back'`.execute(db);
  t.same(
    rows.map((r) => r.type),
    ['released'],
    'a released row wakes claims on every replica',
  );
  const [again] = await claim(server.url, 'back', { max: 1 });
  t.match(again, { id: job.id, attempt: 1 }, 'the next claim gets it as its first attempt');
});

t.test(
  'N waiters on 3 replicas, M jobs from concurrent enqueues on all of them and in SQL, with rollbacks: every job claimed once, promptly',
  async (t) => {
    const dbUrl = await testDatabase(t);
    // No fallback poll: only wake-ups can find the jobs in time.
    const replicas = await Promise.all(
      [0, 1, 2].map(() => startTestServer(t, dbUrl, { pollIntervalMs: 60000 })),
    );
    const db = sqlClient(t, dbUrl);
    for (const [waiters, jobs, max] of [
      [12, 5, 1],
      [12, 12, 1],
      [6, 200, 3],
    ] as const) {
      const queue = `mix-${waiters}-${jobs}`;
      const claimed = new Map<string, number>();
      let doubles = 0;
      let stop = false;
      const workers = Array.from({ length: waiters }, async (_, w) => {
        const base = replicas[w % 3].url;
        while (!stop) {
          const got = await claim(base, queue, { max, wait: WAIT, lease: 60 });
          for (const j of got) {
            const n = (j.payload as { n: number }).n;
            if (claimed.has(String(n))) doubles++;
            claimed.set(String(n), w);
            await ack(base, queue, j.id, j.lease);
          }
        }
      });
      await until(
        () => replicas.reduce((n, r) => n + r.queues.wakeups.size, 0) === waiters,
        10000,
        `${waiters} waiting claims`,
      );
      // Enqueues from every replica at once, and from SQL: some in transactions that roll back.
      let n = 0;
      const enqueuers: Promise<unknown>[] = [];
      while (n < jobs) {
        const k = n++;
        if (k % 4 === 3) {
          enqueuers.push(
            db.transaction().execute(async (trx) => {
              await sql`select commitfeed.enqueue(${queue}, ${JSON.stringify({ n: k })}::jsonb)`.execute(trx);
            }),
            db
              .transaction()
              .execute(async (trx) => {
                await sql`select commitfeed.enqueue(${queue}, '{"n":"ghost"}'::jsonb)`.execute(trx);
                throw new Error('rollback');
              })
              .catch(() => {}),
          );
        } else {
          enqueuers.push(enqueue(replicas[k % 3].url, queue, { payload: { n: k } }));
        }
      }
      await Promise.all(enqueuers);
      await until(() => claimed.size === jobs, 8000, `${jobs} jobs to be claimed (${claimed.size} so far)`);
      t.equal(doubles, 0, `${queue}: no job claimed twice`);
      t.notOk(claimed.has('ghost'), `${queue}: a rolled-back enqueue is never claimed`);
      // Let the workers go: one job per waiter.
      stop = true;
      await enqueue(
        replicas[0].url,
        queue,
        Array.from({ length: waiters * max }, () => ({ payload: { n: 'end' } })),
      );
      await Promise.all(workers);
    }
  },
);

t.test('a woken claim whose client left hands its wake-up to the next waiter', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { pollIntervalMs: 60000 });
  const db = sqlClient(t, dbUrl);
  const { queues } = server;
  const first = new AbortController();
  const a = queues
    .claim('handoff', { max: 1, leaseSeconds: 30, waitSeconds: WAIT }, first.signal)
    .then((r) => r.jobs);
  await until(() => queues.wakeups.size === 1, 5000, 'the first claim to wait');
  const b = queues
    .claim('handoff', { max: 1, leaseSeconds: 30, waitSeconds: WAIT }, new AbortController().signal)
    .then((r) => r.jobs);
  await until(() => queues.wakeups.size === 2, 5000, 'the second claim to wait');
  // A job with no feed row (nothing else would wake anyone), then one wake-up for it, taken by the
  // oldest waiter, whose client goes away before its claim runs.
  await sql`insert into commitfeed.queues (name) values ('handoff') on conflict do nothing`.execute(db);
  await sql`insert into commitfeed.jobs (queue, payload, backoff) values ('handoff', '"x"', '{}')`.execute(
    db,
  );
  queues.wakeups.wake('handoff', 1);
  first.abort();
  t.same(await a, [], 'the claim that left returns nothing');
  const jobs = await within(b, 5000, 'the wake-up to be handed on');
  t.equal(jobs.length, 1, 'the next waiter was woken and claimed the job');
});
