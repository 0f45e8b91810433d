// Waking waiting claims: an enqueue wakes as many waiters as it has jobs (not every waiter), and no
// job is ever stranded while a claim waits — many waiters, many jobs, several replicas enqueueing at
// once, rolled-back enqueues, and a woken claim that leaves before using its wake-up.
import { sql } from 'kysely';
import t from 'tap';
import { compareCursors } from '../src/feed/cursor.ts';
import { sqlClient, startTestServer, testDatabase, until, within } from './helpers.ts';
import { ack, claim, enqueue } from './queue-helpers.ts';

// Claims wait far longer than any `until` below: a job found only when a wait ran out fails the test.
const WAIT = 25;

t.test('one job wakes one of 16 waiting claims; the others sleep on', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl);
  const db = sqlClient(t, dbUrl);
  const { wakeups } = server.queues;
  const got: string[] = [];
  const claims = Array.from({ length: 16 }, () =>
    claim(server.url, 'solo', { max: 1, wait: WAIT }).then((jobs) => {
      for (const j of jobs) got.push(j.id);
      return jobs;
    }),
  );
  await until(() => wakeups.size === 16, 10000, '16 waiting claims');
  const before = wakeups.woken;
  const res = await enqueue(server.url, 'solo', { payload: 1 });
  await until(() => got.length === 1, 5000, 'the job to be claimed');
  // The feed row of that enqueue comes later and must not wake anyone either.
  const { rows } = await sql<{ txid: string; id: string }>`
    select txid::text as txid, id::text as id from commitfeed.feed where stream = 'queue/solo'`.execute(db);
  const row = { txid: Number(rows[0].txid), id: Number(rows[0].id) };
  await until(
    () => compareCursors(server.feed.tailer.position, row) >= 0,
    5000,
    'the tailer to read the wake-up row',
  );
  await until(() => wakeups.size === 15, 5000, 'the other claims to be waiting');
  t.same(got, [res.body.id], 'the job went to one claim');
  t.equal(wakeups.woken - before, 1, 'one waiter woken for one job');
  // Release the rest: 15 jobs in one enqueue wake exactly the 15 waiters.
  await enqueue(
    server.url,
    'solo',
    Array.from({ length: 15 }, (_, i) => ({ payload: i })),
  );
  await Promise.all(claims);
  t.equal(got.length, 16, 'every claim got one job');
  t.equal(wakeups.woken - before, 16, 'each woken once');
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
  const a = queues.claim('handoff', { max: 1, leaseSeconds: 30, waitSeconds: WAIT }, first.signal);
  await until(() => queues.wakeups.size === 1, 5000, 'the first claim to wait');
  const b = queues.claim(
    'handoff',
    { max: 1, leaseSeconds: 30, waitSeconds: WAIT },
    new AbortController().signal,
  );
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
