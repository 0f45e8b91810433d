// Ordered groups and per-queue concurrency limits: one job of a group at a time, in enqueue order,
// other groups in parallel; never more leases than the limit — under many claimers on two replicas,
// with leases that run out and workers that vanish mid-job.
import { sql } from 'kysely';
import t from 'tap';
import { sqlClient, startTestServer, testDatabase, until, within } from './helpers.ts';
import { ack, api, claim, enqueue, nack } from './queue-helpers.ts';

t.test('a group hands out one job at a time, in enqueue order; other groups go in parallel', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl);
  const q = 'orders';
  await enqueue(server.url, q, [
    { payload: 'a1', group: 'a', maxAttempts: 2 },
    { payload: 'b1', group: 'b' },
    { payload: 'a2', group: 'a' },
    { payload: 'free' },
    { payload: 'a3', group: 'a', priority: -5 },
    { payload: 'b2', group: 'b' },
  ]);
  const first = await claim(server.url, q, { max: 10 });
  t.same(
    first.map((j) => j.payload).sort(),
    ['a1', 'b1', 'free'],
    'the head of each group and the ungrouped job (a priority does not jump the group)',
  );
  t.same(await claim(server.url, q, { max: 10 }), [], 'nothing more while the heads are leased');
  const by = new Map(first.map((j) => [j.payload as string, j]));

  // A nack with a retry keeps the job first in its group: the group waits for it.
  const n = await nack(server.url, q, by.get('a1')!.id, { lease: by.get('a1')!.lease, delay: 0 });
  t.equal(n.body.state, 'ready');
  const retried = await claim(server.url, q, { max: 10 });
  t.same(
    retried.map((j) => [j.payload, j.attempt]),
    [['a1', 2]],
    'the retried job comes back before the rest of its group',
  );
  // Out of attempts: a dead job leaves the line and the next one goes.
  const dead = await nack(server.url, q, retried[0].id, { lease: retried[0].lease, error: 'boom' });
  t.equal(dead.body.state, 'dead');
  const next = await claim(server.url, q, { max: 10 });
  t.same(
    next.map((j) => j.payload),
    ['a2'],
  );
  // An ack lets the next job of the group go.
  t.equal((await ack(server.url, q, by.get('b1')!.id, by.get('b1')!.lease)).status, 204);
  t.same(
    (await claim(server.url, q, { max: 10 })).map((j) => j.payload),
    ['b2'],
  );
  t.equal((await ack(server.url, q, next[0].id, next[0].lease)).status, 204);
  t.same(
    (await claim(server.url, q, { max: 10 })).map((j) => j.payload),
    ['a3'],
  );
});

t.test('a waiting claim is woken when an ack releases the next job of a group', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { pollIntervalMs: 60000 });
  const q = 'g';
  await enqueue(server.url, q, [
    { payload: 1, group: 'x' },
    { payload: 2, group: 'x' },
  ]);
  const [j1] = await claim(server.url, q);
  const waiting = claim(server.url, q, { wait: 20 });
  await until(() => server.queues.wakeups.size === 1, 5000, 'the claim to wait');
  const started = Date.now();
  t.equal((await ack(server.url, q, j1.id, j1.lease)).status, 204);
  const [j2] = await waiting;
  t.equal(j2.payload, 2, 'the next job of the group');
  t.ok(Date.now() - started < 5000, 'woken by the ack, not by the end of the wait');
});

t.test(
  '8 claimers on 2 replicas over 4 groups: never two jobs of a group leased at once, each group in order; a vanished worker holds its group until its lease runs out',
  async (t) => {
    const dbUrl = await testDatabase(t);
    const replicas = await Promise.all([0, 1].map(() => startTestServer(t, dbUrl)));
    const db = sqlClient(t, dbUrl);
    const q = 'fifo';
    const GROUPS = 4;
    const PER = 20;
    const ids = new Map<string, string[]>();
    for (let g = 0; g < GROUPS; g++) {
      const res = await enqueue(
        replicas[g % 2].url,
        q,
        Array.from({ length: PER }, (_, i) => ({ payload: { g, i }, group: `g${g}` })),
      );
      ids.set(
        `g${g}`,
        res.body.jobs.map((j: { id: string }) => j.id),
      );
    }
    // A worker that claims the head of g0 and vanishes (its lease runs out in 1 s).
    const [abandoned] = await claim(replicas[0].url, q, { max: 1, lease: 1 });
    t.same(abandoned.payload, { g: 0, i: 0 });
    const order = new Map<string, number[]>();
    let overlaps = 0;
    let stop = false;
    const watcher = (async () => {
      while (!stop) {
        const { rows } = await sql<{ n: number }>`
        select count(*)::int4 as n from (
          select group_key from commitfeed.jobs
          where queue = ${q} and state = 'leased' and lease_expires_at > clock_timestamp()
          group by group_key having count(*) > 1) x`.execute(db);
        overlaps += rows[0].n;
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
    let done = 0;
    const workers = Array.from({ length: 8 }, async (_, w) => {
      const base = replicas[w % 2].url;
      while (done < GROUPS * PER) {
        const jobs = await claim(base, q, { max: 3, wait: 1, lease: 30 });
        for (const j of jobs) {
          const { g, i } = j.payload as { g: number; i: number };
          const list = order.get(`g${g}`) ?? [];
          list.push(i);
          order.set(`g${g}`, list);
          const r = await ack(base, q, j.id, j.lease);
          if (r.status === 204) done++;
        }
      }
    });
    await within(Promise.all(workers), 40000, () => `every job (stuck at ${done})`);
    stop = true;
    await watcher;
    t.equal(overlaps, 0, 'no moment with two live leases in one group');
    for (let g = 0; g < GROUPS; g++) {
      t.same(
        order.get(`g${g}`),
        Array.from({ length: PER }, (_, i) => i),
        `group g${g}: every job once, in enqueue order (g0's head after its lease ran out)`,
      );
    }
  },
);

t.test(
  'a concurrency limit caps live leases across replicas; acks and lease expiry free slots',
  async (t) => {
    const dbUrl = await testDatabase(t);
    const replicas = await Promise.all([0, 1].map(() => startTestServer(t, dbUrl)));
    const db = sqlClient(t, dbUrl);
    const q = 'limited';
    const set = await api(replicas[0].url, 'POST', `/v1/queues/${q}/concurrency`, { limit: 2 });
    t.same(set.body, { queue: q, concurrency: 2 });
    t.equal((await api(replicas[0].url, 'POST', `/v1/queues/${q}/concurrency`, { limit: 0 })).status, 400);
    await enqueue(
      replicas[1].url,
      q,
      Array.from({ length: 30 }, (_, i) => ({ payload: i })),
    );
    t.equal((await claim(replicas[0].url, q, { max: 5 })).length, 2, 'one claim gets at most the limit');
    // Those two leases are abandoned (lease 30 s): they hold both slots.
    t.same(await claim(replicas[1].url, q, { max: 5 }), [], 'no slot left');
    t.match((await api(replicas[1].url, 'GET', `/v1/queues/${q}`)).body, { concurrency: 2, leased: 2 });
    // Release the abandoned leases by ending them now.
    await sql`update commitfeed.jobs set lease_expires_at = clock_timestamp() where queue = ${q} and state = 'leased'`.execute(
      db,
    );
    let peak = 0;
    let done = 0;
    let stop = false;
    const watcher = (async () => {
      while (!stop) {
        const { rows } = await sql<{ n: number }>`
        select count(*)::int4 as n from commitfeed.jobs
        where queue = ${q} and state = 'leased' and lease_expires_at > clock_timestamp()`.execute(db);
        peak = Math.max(peak, rows[0].n);
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
    const seen = new Set<unknown>();
    const workers = Array.from({ length: 6 }, async (_, w) => {
      const base = replicas[w % 2].url;
      while (done < 30) {
        const jobs = await claim(base, q, { max: 5, wait: 1, lease: 30 });
        for (const j of jobs) {
          seen.add(j.payload);
          await new Promise((r) => setTimeout(r, 2));
          if ((await ack(base, q, j.id, j.lease)).status === 204) done++;
        }
      }
    });
    await within(Promise.all(workers), 30000, () => `every job (stuck at ${done})`);
    stop = true;
    await watcher;
    t.equal(seen.size, 30, 'every job handed out');
    t.ok(peak <= 2 && peak > 0, `never more than 2 live leases at once (peak ${peak})`);
    // Removing the limit.
    t.same((await api(replicas[0].url, 'POST', `/v1/queues/${q}/concurrency`, { limit: null })).body, {
      queue: q,
      concurrency: null,
    });
  },
);
