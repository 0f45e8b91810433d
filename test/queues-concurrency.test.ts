// Queues under concurrency: many claimers never share a job, every job is acked exactly once, and
// waiting claims hold no database connection.
import t from 'tap';
import { sleep, sqlClient, startTestServer, testDatabase } from './helpers.ts';
import { ack, api, claim, enqueue, jobRows, stats } from './queue-helpers.ts';

t.test('16 concurrent claimers: 5,000 jobs, each handed out once and acked exactly once', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl);
  const db = sqlClient(t, dbUrl);
  const N = 5000;
  const enqueued: string[] = [];
  const enqueuing = (async () => {
    for (let b = 0; b < N / 1000; b++) {
      const res = await enqueue(
        server.url,
        'bulk',
        Array.from({ length: 1000 }, (_, i) => ({ payload: { n: b * 1000 + i } })),
      );
      enqueued.push(...res.body.jobs.map((j: { id: string }) => j.id));
    }
  })();
  const claimedBy = new Map<string, number>();
  let doubles = 0;
  let acked = 0;
  let ackFailures = 0;
  const worker = async (w: number) => {
    for (;;) {
      const jobs = await claim(server.url, 'bulk', { max: 20, wait: 1, lease: 60 });
      if (jobs.length === 0) {
        if (acked >= N) return;
        continue;
      }
      for (const j of jobs) {
        if (claimedBy.has(j.id)) doubles++;
        claimedBy.set(j.id, w);
      }
      // Half the workers ack one by one, half in batches.
      if (w % 2 === 0) {
        // Concurrent single acks: the ack batcher groups them into shared statements.
        for (const r of await Promise.all(jobs.map((j) => ack(server.url, 'bulk', j.id, j.lease)))) {
          if (r.status === 204) acked++;
          else ackFailures++;
        }
      } else {
        const r = await api(
          server.url,
          'POST',
          '/v1/queues/bulk/ack',
          jobs.map((j) => ({ id: j.id, lease: j.lease })),
        );
        for (const x of r.body.results) {
          if (x.ok) acked++;
          else ackFailures++;
        }
      }
    }
  };
  await Promise.all([enqueuing, ...Array.from({ length: 16 }, (_, w) => worker(w))]);
  t.equal(doubles, 0, 'no job was handed to two claimers');
  t.equal(ackFailures, 0, 'no ack failed');
  t.equal(acked, N, 'every job acked once');
  t.equal(claimedBy.size, N);
  t.same([...claimedBy.keys()].sort(), [...enqueued].sort(), 'exactly the enqueued jobs');
  t.equal(new Set(claimedBy.values()).size, 16, 'every worker got work');
  t.same(
    (await jobRows(db)).filter((r) => r.state !== 'completed'),
    [],
    'every job completed',
  );
  t.match(await stats(server.url, 'bulk'), { completed: N, ready: 0, leased: 0 });
});

t.test('waiting claims hold no database connection', async (t) => {
  // Two pooled connections and 30 waiting claims: if a claim held a connection while waiting, the
  // enqueue below could not run.
  const server = await startTestServer(t, await testDatabase(t), { poolSize: 2, pollIntervalMs: 60000 });
  const waiting = Promise.all(Array.from({ length: 30 }, () => claim(server.url, 'idle', { wait: 10 })));
  await sleep(300);
  const start = Date.now();
  const e = await enqueue(
    server.url,
    'idle',
    Array.from({ length: 30 }, (_, i) => ({ payload: i })),
  );
  t.equal(e.status, 201);
  const got = (await waiting).flat();
  t.equal(got.length, 30, 'each waiting claim got one job');
  t.equal(new Set(got.map((j) => j.id)).size, 30, 'all different');
  t.ok(Date.now() - start < 5000, `served at the commit (${Date.now() - start} ms)`);
});
