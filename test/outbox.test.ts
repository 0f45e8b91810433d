// The transactional outbox: commitfeed.publish (SQL) and the library API (src/index.ts) inside the
// application's own transaction. Wakes come from the NOTIFY at the application's COMMIT: every server
// here polls once a minute, so a missing notify fails the test. Each wake test repeats 20 times.
import { sql } from 'kysely';
import t from 'tap';
import { ApiError } from '../src/errors.ts';
import { appendEvents } from '../src/feed/queries/append.ts';
import { toEventInput } from '../src/feed/event.ts';
import { publish, publishMany } from '../src/index.ts';
import type { Server } from '../src/server.ts';
import {
  feedRows,
  openSse,
  pgClient,
  publish as httpPublish,
  sleep,
  sqlClient,
  startTestServer,
  testDatabase,
} from './helpers.ts';

const RUNS = 20;
const NO_POLL = { pollIntervalMs: 600_000 };
/** Generous bound for "promptly": the fallback poll is 10 minutes away. */
const PROMPT_MS = 3000;

const wakes = (s: Server) => ({
  notifications: s.feed.listener.stats.notifications,
  reads: s.feed.tailer.stats.reads,
});

t.test(
  'commitfeed.publish in the application transaction: visible and woken at COMMIT, 20 runs',
  async (t) => {
    const url = await testDatabase(t);
    const server = await startTestServer(t, url, NO_POLL);
    const app = await pgClient(t, url);
    await app.query('create table orders (id int primary key, total numeric)');
    const sse = await openSse(t, `${server.url}/v1/streams/orders/events`);
    for (let i = 0; i < RUNS; i++) {
      const before = wakes(server);
      await app.query('BEGIN');
      await app.query('insert into orders values ($1, $2)', [i, 9.5]);
      const { rows } = await app.query<{ id: string }>(
        `select commitfeed.publish('orders', jsonb_build_object('order', $1::int), 'created') as id`,
        [i],
      );
      // Statement done, transaction open: nothing is visible and nobody was woken.
      await sleep(30);
      t.equal(sse.received.length, i, `run ${i}: nothing delivered while the transaction is open`);
      t.equal(wakes(server).notifications, before.notifications, `run ${i}: no notify before COMMIT`);
      const committedAt = Date.now();
      await app.query('COMMIT');
      const got = await sse.waitFor(i + 1, PROMPT_MS);
      t.ok(Date.now() - committedAt < PROMPT_MS, `run ${i}: delivered promptly after COMMIT`);
      t.same(
        [got[i].id, got[i].event, got[i].data],
        [rows[0].id, 'created', `{"order": ${i}}`],
        `run ${i}: the event`,
      );
      t.equal(wakes(server).notifications - before.notifications, 1, `run ${i}: woken by one notify`);
    }
  },
);

t.test(
  "this process's own commits wake the tailer directly; their notifications are not acted on",
  async (t) => {
    const url = await testDatabase(t);
    const server = await startTestServer(t, url, NO_POLL);
    const sse = await openSse(t, `${server.url}/v1/streams/own/events`);
    await server.feed.tailer.settled(); // the read the listener asks for at connect is done
    const readsBefore = server.feed.tailer.stats.reads;
    const timerBefore = server.feed.tailer.stats.fallbackWakes;
    for (let i = 0; i < 10; i++) {
      t.equal((await httpPublish(server.url, 'own', { data: { i } })).status, 201);
      await sse.waitFor(i + 1, PROMPT_MS);
    }
    const { listener, tailer } = server.feed;
    for (let i = 0; i < 50 && listener.stats.notifications < 10; i++) await sleep(20);
    t.equal(listener.stats.notifications, 10, 'every commit notified');
    t.equal(listener.stats.own, 10, 'all of them recognised as our own');
    // Timer reads are not ours to count: a transaction anywhere in the cluster (the horizon is
    // cluster-wide) makes the tailer re-poll while rows wait behind it.
    const timerReads = tailer.stats.fallbackWakes - timerBefore;
    t.ok(
      tailer.stats.reads - readsBefore - timerReads <= 10,
      `one tail read per commit (${tailer.stats.reads - readsBefore} reads, ${timerReads} of them by timer)`,
    );

    // Another session's commit is still heard and acted on (with the poll off, nothing else would).
    const app = await pgClient(t, url);
    await app.query(`select commitfeed.publish('own', '{"from":"sql"}'::jsonb)`);
    const got = await sse.waitFor(11, PROMPT_MS);
    t.equal(got[10].data, '{"from": "sql"}', 'delivered by the notify alone');
    t.equal(listener.stats.own, 10, 'not counted as our own');
  },
);

t.test('a rolled-back application transaction: no event, no notify, no tailer read, 20 runs', async (t) => {
  const url = await testDatabase(t);
  const server = await startTestServer(t, url, NO_POLL);
  const app = await pgClient(t, url);
  const db = sqlClient(t, url);
  const sse = await openSse(t, `${server.url}/v1/streams/ghost/events`);
  await sleep(50); // let start-up reads settle
  for (let i = 0; i < RUNS; i++) {
    const before = wakes(server);
    await app.query('BEGIN');
    await app.query(`select commitfeed.publish('ghost', '{"n": 1}')`);
    await publish(app, 'ghost', { n: 2 });
    await app.query('ROLLBACK');
    await sleep(50);
    t.same(wakes(server), before, `run ${i}: no notification and no read`);
  }
  t.equal(sse.received.length, 0, 'no event delivered');
  t.equal((await feedRows(db)).length, 0, 'nothing in the feed');
  // The stream still works: one committed publish arrives.
  await app.query(`select commitfeed.publish('ghost', '"real"')`);
  t.equal((await sse.waitFor(1, PROMPT_MS))[0].data, '"real"');
});

t.test('the library API with Kysely and with pg: commits together with the application rows', async (t) => {
  const url = await testDatabase(t);
  const server = await startTestServer(t, url, NO_POLL);
  const db = sqlClient(t, url);
  const app = await pgClient(t, url);
  await sql`create table orders (id int primary key)`.execute(db);
  const sse = await openSse(t, `${server.url}/v1/events?stream=orders&stream=invoices`);

  const a = await db.transaction().execute(async (trx) => {
    await sql`insert into orders values (1)`.execute(trx);
    return publish(trx, 'orders', { order: 1 }, { type: 'created', key: 'order-1' });
  });
  t.same({ ...a, id: undefined }, { id: undefined, stream: 'orders', duplicate: false });
  const again = await db
    .transaction()
    .execute((trx) => publish(trx, 'orders', { order: 1 }, { key: 'order-1' }));
  t.same(again, { id: a.id, stream: 'orders', duplicate: true }, 'a key already used returns the original');

  await app.query('BEGIN');
  await app.query('insert into orders values (2)');
  const many = await publishMany(app, [
    { stream: 'orders', data: { order: 2 }, type: 'created' },
    { stream: 'invoices', data: { order: 2 }, key: 'inv-2' },
    { stream: 'invoices', data: { order: 2, copy: true }, key: 'inv-2' },
  ]);
  await app.query('COMMIT');
  t.same(
    many.map((r) => [r.stream, r.duplicate]),
    [
      ['orders', false],
      ['invoices', false],
      ['invoices', true],
    ],
  );
  t.equal(many[2].id, many[1].id, 'a key repeated in one call is appended once');
  const got = await sse.waitFor(3, PROMPT_MS);
  // On several streams an event's id names its stream after the cursor.
  t.same(
    got.map((m) => m.id),
    [`${a.id}/orders`, `${many[0].id}/orders`, `${many[1].id}/invoices`],
  );

  // A failing application transaction takes its events with it.
  await t.rejects(
    db.transaction().execute(async (trx) => {
      await publish(trx, 'orders', { order: 3 });
      await sql`insert into orders values (1)`.execute(trx); // duplicate primary key
    }),
  );
  t.equal((await feedRows(db)).length, 3, 'the rolled-back event is not in the feed');

  // Invalid input is refused before anything is sent, with the API's error codes.
  await t.rejects(publish(db, 'bad name', {}), { code: 'invalid_name' });
  await t.rejects(publish(db, 'ok', undefined), { code: 'invalid_request' });
  await t.rejects(
    publishMany(app, [
      { stream: 'ok', data: 1 },
      { stream: 'ok', data: 2, type: 'a\nb' },
    ]),
    {
      message: /^events\[1\]\.type/,
    },
  );
  await t.rejects(publish(db, 'x', 1, { key: '' }), { code: 'invalid_request' });
  t.equal((await feedRows(db)).length, 3, 'nothing written by invalid calls');
  t.type(ApiError, 'function');
});

t.test(
  'one transaction, several streams: each subscriber sees its events in write order, after earlier transactions, 20 runs',
  async (t) => {
    const url = await testDatabase(t);
    const server = await startTestServer(t, url, NO_POLL);
    const app = await pgClient(t, url);
    const subA = await openSse(t, `${server.url}/v1/streams/a/events`);
    const subB = await openSse(t, `${server.url}/v1/streams/b/events`);
    const subAB = await openSse(t, `${server.url}/v1/events?stream=a&stream=b`);
    const expectA: string[] = [];
    const expectB: string[] = [];
    const expectAB: string[] = [];
    for (let i = 0; i < RUNS; i++) {
      // An earlier transaction, committed first.
      const first = await publish(app, 'b', { run: i, n: 0 });
      await app.query('BEGIN');
      const ids: [string, string][] = [];
      for (const [s, n] of [
        ['a', 1],
        ['b', 2],
        ['a', 3],
        ['b', 4],
        ['a', 5],
      ] as const) {
        const { rows } = await app.query<{ id: string }>('select commitfeed.publish($1, $2::jsonb) as id', [
          s,
          JSON.stringify({ run: i, n }),
        ]);
        ids.push([s, rows[0].id]);
      }
      await app.query('COMMIT');
      expectB.push(first.id);
      // On several streams an event's id names its stream after the cursor.
      expectAB.push(`${first.id}/b`);
      for (const [s, id] of ids) {
        (s === 'a' ? expectA : expectB).push(id);
        expectAB.push(`${id}/${s}`);
      }
      const [gotA, gotB, gotAB] = await Promise.all([
        subA.waitFor(expectA.length, PROMPT_MS),
        subB.waitFor(expectB.length, PROMPT_MS),
        subAB.waitFor(expectAB.length, PROMPT_MS),
      ]);
      t.same(
        gotA.map((m) => m.id),
        expectA,
        `run ${i}: stream a in write order`,
      );
      t.same(
        gotB.map((m) => m.id),
        expectB,
        `run ${i}: stream b, the earlier transaction first`,
      );
      t.same(
        gotAB.map((m) => m.id),
        expectAB,
        `run ${i}: both streams on one connection, one order`,
      );
    }
    await sleep(100);
    t.same(
      [subA.received.length, subB.received.length, subAB.received.length],
      [expectA.length, expectB.length, expectAB.length],
      'nothing extra',
    );
  },
);

t.test('validation: commitfeed.append (SQL) accepts exactly what the HTTP API accepts', async (t) => {
  const url = await testDatabase(t);
  const server = await startTestServer(t, url, NO_POLL);
  const db = server.db;
  const long = (n: number, c = 'a') => c.repeat(n);
  const streams = [
    'a',
    'A-z_0.9:x',
    long(200),
    long(201),
    '',
    'has space',
    'é',
    'a/b',
    'queue',
    'x\ny',
    '😀',
  ];
  const types = [
    undefined,
    'created',
    long(200, 'é'),
    long(201, 'é'),
    long(200, '😀'),
    long(201, '😀'),
    '',
    'a\nb',
    'tab\t',
    'del\u007f',
    'ok ü',
  ];
  const keys = [
    undefined,
    'k',
    long(200, '😀'),
    long(201, '😀'),
    long(200),
    long(201),
    '',
    'with space and ü',
  ];
  const cases: { stream: string; type?: string; key?: string }[] = [];
  for (const stream of streams) cases.push({ stream });
  for (const type of types) cases.push({ stream: 'ok', type });
  for (const key of keys) cases.push({ stream: 'ok', key });
  let accepted = 0;
  for (const [i, c] of cases.entries()) {
    let ts: string;
    try {
      toEventInput(c.stream, { data: i, type: c.type, key: c.key }, 1 << 20);
      ts = 'ok';
    } catch (err) {
      ts = (err as ApiError).code;
    }
    let db_: string;
    try {
      await db.transaction().execute(async (trx) => {
        await sql`select * from commitfeed.append(${[c.stream]}::text[], ${[c.type ?? null]}::text[], ${[c.key ?? null]}::text[], ${[String(i)]}::json[])`.execute(
          trx,
        );
        throw new Error('rollback');
      });
    } catch (err) {
      db_ = (err as Error).message === 'rollback' ? 'ok' : 'rejected';
    }
    t.equal(
      db_!,
      ts === 'ok' ? 'ok' : 'rejected',
      `case ${i} ${JSON.stringify(c).slice(0, 60)}: TS says ${ts}`,
    );
    if (ts === 'ok') accepted++;
  }
  t.ok(accepted > 5 && accepted < cases.length - 5, 'the corpus has both kinds');
  // Through commitfeed.publish: the same message as the HTTP API's.
  const http = await httpPublish(server.url, 'has%20space', { data: 1 });
  await t.rejects(sql`select commitfeed.publish('has space', '1')`.execute(db), {
    message: /^stream name must be 1-200 characters of letters, digits and \. _ : - \(got "has space"\)$/,
  });
  t.equal(http.status, 400);
  // 'queue/<name>' streams are written by enqueue (same function), never by publish.
  await t.rejects(sql`select commitfeed.publish('queue/jobs', '1')`.execute(db), { message: /stream name/ });
  await t.rejects(sql`select commitfeed.publish('ok', null)`.execute(db), {
    message: /data must not be SQL NULL/,
  });
});

t.test('the three ways in write identical rows and share key dedup', async (t) => {
  const url = await testDatabase(t);
  const server = await startTestServer(t, url, NO_POLL);
  const db = sqlClient(t, url);
  const data = { n: 1, s: 'ü', nested: [1, { x: null }] };
  const viaHttp = await fetch(`${server.url}/v1/tx`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ops: [{ publish: { stream: 'http', data, type: 't', key: 'k' } }] }),
  });
  t.equal(viaHttp.status, 200);
  await publish(db, 'lib', data, { type: 't', key: 'k' });
  await sql`select commitfeed.publish('sql', ${JSON.stringify(data)}::jsonb, 't', 'k')`.execute(db);
  await appendEvents(db, [{ stream: 'batcher', type: 't', key: 'k', data: JSON.stringify(data) }]);
  const { rows } = await sql<{ stream: string; type: string; key: string; data: unknown }>`
    select stream, type, key, data::jsonb as data from commitfeed.feed order by txid, id`.execute(db);
  t.same(
    rows.map((r) => r.stream),
    ['http', 'lib', 'sql', 'batcher'],
  );
  for (const r of rows)
    t.same({ type: r.type, key: r.key, data: r.data }, { type: 't', key: 'k', data }, r.stream);
  // A key used through one way is a duplicate through every other.
  const dupSql = await sql<{ id: string }>`select commitfeed.publish('lib', '2', null, 'k') as id`.execute(
    db,
  );
  const dupLib = await publish(db, 'sql', 2, { key: 'k' });
  const dupHttp = await httpPublish(server.url, 'batcher', { data: 2, key: 'k' });
  const ids = (await feedRows(db)).map((r) => r.cursor);
  // One form of cursor whichever way wrote: tagged with the feed.
  t.same([dupSql.rows[0].id, dupLib.id, dupHttp.body.id], [ids[1], ids[2], ids[3]]);
  t.equal(dupHttp.body.duplicate, true);
  t.equal(ids.length, 4, 'no duplicate appended');
});
