// POST /v1/tx: several ops, one transaction. Results in order, all-or-nothing validation naming the
// op, one notify per transaction, and wakes on another server (which has no local poke: only the
// NOTIFY can wake it, and its fallback poll is 10 minutes away). Wake tests repeat 20 times.
import pg from 'pg';
import t from 'tap';
import { enqueue, publish as publishInTx } from '../src/index.ts';
import type { Server } from '../src/server.ts';
import { feedRows, openSse, publish, sleep, sqlClient, startTestServer, testDatabase } from './helpers.ts';
import { claim, timed } from './queue-helpers.ts';

const RUNS = 20;
const NO_POLL = { pollIntervalMs: 600_000 };
const PROMPT_MS = 3000;

async function tx(base: string, body: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${base}/v1/tx`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

type Results = { results: { publish: { id: string; stream: string; duplicate: boolean } }[] };

const notifications = (s: Server) => s.feed.listener.stats.notifications;

t.test('publish ops: results in order, rows in op order, one transaction', async (t) => {
  const url = await testDatabase(t);
  const server = await startTestServer(t, url, NO_POLL);
  const db = sqlClient(t, url);
  const res = await tx(server.url, {
    ops: [
      { publish: { stream: 'orders', data: { order: 1 }, type: 'created' } },
      { publish: { stream: 'payments', data: { order: 1, amount: 9.5 }, key: 'pay-1' } },
      { publish: { stream: 'orders', data: null } },
      { publish: { stream: 'payments', data: 'again', key: 'pay-1' } },
    ],
  });
  t.equal(res.status, 200);
  const { results } = res.body as Results;
  t.same(
    results.map((r) => [r.publish.stream, r.publish.duplicate]),
    [
      ['orders', false],
      ['payments', false],
      ['orders', false],
      ['payments', true],
    ],
  );
  t.equal(results[3].publish.id, results[1].publish.id, 'the repeated key reports the first');
  const rows = await feedRows(db);
  t.same(
    rows.map((r) => r.cursor),
    results.slice(0, 3).map((r) => r.publish.id),
  );
  t.equal(new Set(rows.map((r) => r.cursor.split('-')[0])).size, 1, 'one transaction id');
  // A key used before the transaction is a duplicate inside it.
  const again = await tx(server.url, { ops: [{ publish: { stream: 'payments', data: 1, key: 'pay-1' } }] });
  t.same((again.body as Results).results[0].publish, { ...results[1].publish, duplicate: true });
});

t.test('an invalid op is a 400 naming it, and nothing is written', async (t) => {
  const url = await testDatabase(t);
  const server = await startTestServer(t, url, NO_POLL);
  const db = sqlClient(t, url);
  const good = { publish: { stream: 'ok', data: 1 } };
  const cases: [unknown, RegExp, string?][] = [
    [
      [good, good, good, { publish: { stream: 'bad name', data: 1 } }],
      /^ops\[3\]\.publish\.stream: stream name/,
      'invalid_name',
    ],
    [[good, { publish: { stream: 'ok' } }], /^ops\[1\]\.publish must have required property 'data'/],
    [[good, { publish: { stream: 'ok', data: 1, type: 'a\nb' } }], /^ops\[1\]\.publish\.type/],
    [[good, { publish: { stream: 'ok', data: 1, key: '' } }], /^ops\[1\]\.publish\.key/],
    [
      [good, { publish: { stream: 'ok', data: 1, extra: true } }],
      /^ops\[1\]\.publish must NOT have additional property 'extra'/,
    ],
    [
      [{ publish: { stream: 'ok', data: 1 }, enqueue: {} }, good],
      /^ops\[0\] must be an object with exactly one of/,
    ],
    [[good, { frobnicate: {} }], /^ops\[1\] must be an object with exactly one of .*\(got "frobnicate"\)/],
    [[good, 'publish'], /^ops\[1\] must be an object/],
    [[good, { publish: [1] }], /^ops\[1\]\.publish must be an object/],
    [[], /ops must NOT have fewer than 1 items/],
    [Array.from({ length: 1001 }, () => good), /ops must NOT have more than 1000 items/],
  ];
  for (const [ops, message, code] of cases) {
    const res = await tx(server.url, { ops });
    t.equal(res.status, 400, String(message));
    t.match(res.body, { statusCode: 400, error: 'Bad Request', code: code ?? 'invalid_request', message });
  }
  const other = await tx(server.url, { ops: [good], extra: 1 });
  t.equal(other.status, 400, 'unknown top-level property');
  const big = await tx(server.url, {
    ops: [good, { publish: { stream: 'ok', data: 'x'.repeat(1_100_000) } }],
  });
  t.equal(big.status, 413, 'an oversized body');
  t.equal((await feedRows(db)).length, 0, 'nothing written by any invalid request');
  const ok = await tx(server.url, { ops: Array.from({ length: 1000 }, () => good) });
  t.equal(ok.status, 200, '1000 ops are accepted');
  t.equal((await feedRows(db)).length, 1000);
});

t.test('a transaction of many events notifies once and wakes another server promptly, 20 runs', async (t) => {
  const url = await testDatabase(t);
  const writer = await startTestServer(t, url, NO_POLL);
  const reader = await startTestServer(t, url, NO_POLL);
  const sseA = await openSse(t, `${reader.url}/v1/streams/a/events`);
  const sseB = await openSse(t, `${reader.url}/v1/streams/b/events`);
  let expectA: string[] = [];
  let expectB: string[] = [];
  for (let i = 0; i < RUNS; i++) {
    const before = notifications(reader);
    const started = Date.now();
    const res = await tx(writer.url, {
      ops: Array.from({ length: 10 }, (_, j) => ({ publish: { stream: j % 3 ? 'a' : 'b', data: { i, j } } })),
    });
    t.equal(res.status, 200);
    const ids = (res.body as Results).results.map((r) => r.publish);
    expectA = [...expectA, ...ids.filter((r) => r.stream === 'a').map((r) => r.id)];
    expectB = [...expectB, ...ids.filter((r) => r.stream === 'b').map((r) => r.id)];
    const [gotA, gotB] = await Promise.all([
      sseA.waitFor(expectA.length, PROMPT_MS),
      sseB.waitFor(expectB.length, PROMPT_MS),
    ]);
    t.ok(Date.now() - started < PROMPT_MS, `run ${i}: delivered promptly on the other server`);
    t.same(
      gotA.map((m) => m.id),
      expectA,
      `run ${i}: stream a in op order`,
    );
    t.same(
      gotB.map((m) => m.id),
      expectB,
      `run ${i}: stream b in op order`,
    );
    await sleep(20);
    t.equal(notifications(reader) - before, 1, `run ${i}: one notify for ten events`);
  }
});

t.test('auto-commit HTTP publishes still wake another server through the notify, 20 runs', async (t) => {
  const url = await testDatabase(t);
  const writer = await startTestServer(t, url, NO_POLL);
  const reader = await startTestServer(t, url, NO_POLL);
  const sse = await openSse(t, `${reader.url}/v1/streams/s/events`);
  const ids: string[] = [];
  for (let i = 0; i < RUNS; i++) {
    const before = notifications(reader);
    const res = await publish(writer.url, 's', i % 2 ? { data: i } : [{ data: i }, { data: `${i}b` }]);
    t.equal(res.status, 201);
    ids.push(...(res.body.events ? res.body.events.map((e) => e.id) : [res.body.id]));
    const got = await sse.waitFor(ids.length, PROMPT_MS);
    t.same(
      got.map((m) => m.id),
      ids,
      `run ${i}: delivered in order`,
    );
    await sleep(20);
    t.equal(notifications(reader) - before, 1, `run ${i}: one notify per publish request`);
  }
});

t.test('the database down: 503 with Retry-After, nothing half-written', async (t) => {
  const url = await testDatabase(t);
  const server = await startTestServer(t, url, { ...NO_POLL, statementTimeoutMs: 500 });
  const db = sqlClient(t, url);
  // Hold a lock the insert needs: the statement times out, which the API reports as unavailable.
  const blocker = await db.connection().execute(async (conn) => {
    const { sql } = await import('kysely');
    await sql`begin`.execute(conn);
    await sql`lock table commitfeed.feed in access exclusive mode`.execute(conn);
    const res = await tx(server.url, {
      ops: [{ publish: { stream: 's', data: 1 } }, { publish: { stream: 's', data: 2 } }],
    });
    await sql`rollback`.execute(conn);
    return res;
  });
  t.equal(blocker.status, 503);
  t.match(blocker.body, { code: 'unavailable' });
  t.equal((await feedRows(db)).length, 0);
  t.equal(
    (await tx(server.url, { ops: [{ publish: { stream: 's', data: 3 } }] })).status,
    200,
    'works again',
  );
});

t.test('publish and enqueue ops in one transaction: results in order, all or nothing', async (t) => {
  const url = await testDatabase(t);
  const server = await startTestServer(t, url, NO_POLL);
  const db = sqlClient(t, url);
  const res = await tx(server.url, {
    ops: [
      { publish: { stream: 'orders', data: { order: 7 }, type: 'created' } },
      { enqueue: { queue: 'emails', payload: { order: 7 }, key: 'mail-7', priority: 2 } },
      { enqueue: { queue: 'emails', payload: { order: 7 }, key: 'mail-7' } },
      { publish: { stream: 'orders', data: { order: 7, queued: true } } },
    ],
  });
  t.equal(res.status, 200);
  const r = res.body.results as Record<string, { id: string; duplicate: boolean }>[];
  t.same(
    r.map((x) => Object.keys(x)[0]),
    ['publish', 'enqueue', 'enqueue', 'publish'],
  );
  t.match(r[1].enqueue, { id: /^\d+$/, queue: 'emails', duplicate: false });
  t.same(r[2].enqueue, { ...r[1].enqueue, duplicate: true }, 'a repeated job key reports the first');
  const jobs = await claim(server.url, 'emails', { max: 10 });
  t.same(
    jobs.map((j) => [j.id, j.payload]),
    [[r[1].enqueue.id, { order: 7 }]],
  );
  const rows = await feedRows(db);
  t.equal(
    new Set(rows.map((x) => x.cursor.split('-')[0])).size,
    1,
    'events and the queue wake-up: one transaction',
  );

  // An invalid enqueue op: a 400 naming it, and the valid publish before it is not written either.
  const before = (await feedRows(db)).length;
  for (const [op, message] of [
    [{ enqueue: { queue: 'bad queue', payload: 1 } }, /^ops\[1\]\.enqueue\.queue: queue name/],
    [{ enqueue: { queue: 'q' } }, /^ops\[1\]\.enqueue must have required property 'payload'/],
    [{ enqueue: { queue: 'q', payload: 1, priority: 1.5 } }, /^ops\[1\]\.enqueue\.priority/],
    [
      { enqueue: { queue: 'q', payload: 1, lease: 5 } },
      /^ops\[1\]\.enqueue must NOT have additional property 'lease'/,
    ],
  ] as const) {
    const bad = await tx(server.url, { ops: [{ publish: { stream: 'orders', data: 'no' } }, op] });
    t.equal(bad.status, 400);
    t.match(bad.body.message, message);
  }
  t.equal((await feedRows(db)).length, before, 'nothing written');
  t.same(await claim(server.url, 'q'), [], 'no job enqueued');
});

t.test(
  'enqueue in a transaction wakes a waiting long-poll claimer at commit, not before, 20 runs',
  async (t) => {
    const url = await testDatabase(t);
    const server = await startTestServer(t, url, NO_POLL);
    const db = sqlClient(t, url);
    const app = await (async () => {
      const c = new pg.Client({ connectionString: url });
      c.on('error', () => {});
      await c.connect();
      t.teardown(() => c.end());
      return c;
    })();
    for (let i = 0; i < RUNS; i++) {
      const waiting = timed(claim(server.url, 'work', { wait: 20 }));
      await sleep(30); // the claim is waiting
      let committedAt = 0;
      if (i % 2 === 0) {
        // The library, in a Kysely transaction.
        await db.transaction().execute(async (trx) => {
          const job = await enqueue(trx, 'work', { i }, { key: `k${i}` });
          t.equal(job.duplicate, false);
          await sleep(40);
          t.notOk(waiting.settled(), `run ${i}: the claimer still waits while the transaction is open`);
          committedAt = Date.now();
        });
      } else {
        // The library on a pg client inside the application's BEGIN/COMMIT, next to a publish.
        await app.query('BEGIN');
        await enqueue(app, 'work', { i });
        await publishInTx(app, 'audit', { enqueued: i });
        await sleep(40);
        t.notOk(waiting.settled(), `run ${i}: the claimer still waits while the transaction is open`);
        committedAt = Date.now();
        await app.query('COMMIT');
      }
      const { value: jobs, at } = await waiting;
      t.same(
        jobs.map((j) => j.payload),
        [{ i }],
        `run ${i}: the claimer got the job`,
      );
      t.ok(
        at >= committedAt && at - committedAt < PROMPT_MS,
        `run ${i}: woken right after COMMIT (${at - committedAt} ms)`,
      );
    }
    // A rolled-back enqueue wakes nobody and leaves no job.
    const waiting = timed(claim(server.url, 'work', { wait: 1 }));
    await sleep(30);
    const before = notifications(server);
    await app.query('BEGIN');
    await enqueue(app, 'work', { ghost: true });
    await app.query('ROLLBACK');
    const { value } = await waiting;
    t.same(value, [], 'the claimer times out empty');
    t.equal(notifications(server), before, 'no notification');
  },
);
