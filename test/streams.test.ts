// Publish and read over HTTP against a real PostgreSQL: SSE delivery, JSON pages, long-poll,
// resume (Last-Event-ID, ?after, across a restart), priming, multi-stream reads, catch-up hand-over.
import t from 'tap';
import {
  CURSOR_TEXT,
  feedRows,
  openSse,
  publish,
  sleep,
  sqlClient,
  startTestServer,
  testDatabase,
} from './helpers.ts';

t.test('publish → SSE delivery, in order, with ids and types', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const sse = await openSse(t, `${server.url}/v1/streams/orders/events`);
  t.equal(sse.status, 200);
  t.match(sse.primed, CURSOR_TEXT, 'the cursor is primed at connect');
  const a = await publish(server.url, 'orders', { data: { n: 1 }, type: 'created' });
  const other = await publish(server.url, 'other', { data: 'not for orders' });
  const b = await publish(server.url, 'orders', { data: [2, 'two'] });
  t.equal(a.status, 201);
  t.equal(other.status, 201);
  const got = await sse.waitFor(2);
  t.same(
    got.map((m) => [m.id, m.event, m.data]),
    [
      [a.body.id, 'created', '{"n":1}'],
      [b.body.id, undefined, '[2,"two"]'],
    ],
  );
  await sleep(100);
  t.equal(sse.received.length, 2, 'nothing from other streams, nothing twice');
});

t.test('batch publish is ordered and all-or-nothing', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl);
  const db = sqlClient(t, dbUrl);
  const res = await publish(server.url, 's', [{ data: 1 }, { data: 2 }, { data: 3, type: 'x' }]);
  t.equal(res.status, 201);
  const ids = res.body.events!.map((e) => e.id);
  t.same(
    (await feedRows(db)).map((r) => r.cursor),
    ids,
    'ids in the order given',
  );
  const bad = await publish(server.url, 's', [{ data: 4 }, { nodata: true }]);
  t.equal(bad.status, 400);
  t.equal((await feedRows(db)).length, 3, 'an invalid element writes nothing');
});

t.test('JSON reads: pages, next cursor, limit, earliest, latest', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const ids: string[] = [];
  for (let i = 0; i < 5; i++)
    ids.push((await publish(server.url, 'j', { data: { i }, key: `k${i}` })).body.id);
  await publish(server.url, 'elsewhere', { data: 0 });
  const get = async (q: string) => {
    const res = await fetch(`${server.url}/v1/streams/j/events${q}`);
    return {
      status: res.status,
      body: (await res.json()) as {
        events: { id: string; data: unknown; key: string; time: string; stream: string; type: null }[];
        next: string;
      },
    };
  };
  // No wait here: reads right after acknowledged publishes must see them (read-your-writes).
  const p1 = await get('?from=earliest&limit=3');
  t.equal(p1.status, 200);
  t.same(
    p1.body.events.map((e) => e.id),
    ids.slice(0, 3),
  );
  t.same(p1.body.events[0], { ...p1.body.events[0], stream: 'j', type: null, key: 'k0', data: { i: 0 } });
  t.ok(!Number.isNaN(Date.parse(p1.body.events[0].time)), 'time is an ISO timestamp');
  t.equal(p1.body.next, ids[2]);
  const p2 = await get(`?after=${p1.body.next}`);
  t.same(
    p2.body.events.map((e) => e.id),
    ids.slice(3),
  );
  const p3 = await get(`?after=${p2.body.next}`);
  t.same(p3.body.events, [], 'nothing after the end');
  t.equal(p3.body.next, p2.body.next, 'empty page keeps the cursor');
  const latest = await get('');
  t.same(latest.body.events, [], 'latest starts at the tail');
  t.match(latest.body.next, CURSOR_TEXT);
});

t.test('long-poll wakes when an event arrives, and times out empty', async (t) => {
  const server = await startTestServer(t, await testDatabase(t), { pollIntervalMs: 60000 });
  const start = Date.now();
  const empty = await fetch(`${server.url}/v1/streams/lp/events?wait=0.3`);
  const emptyBody = (await empty.json()) as { events: unknown[]; next: string };
  t.same(emptyBody.events, []);
  t.ok(Date.now() - start >= 280, 'waited for the timeout');

  const waiting = fetch(`${server.url}/v1/streams/lp/events?wait=10&after=${emptyBody.next}`).then(
    async (r) => ({ at: Date.now(), body: (await r.json()) as { events: { id: string }[] } }),
  );
  await sleep(200);
  const published = await publish(server.url, 'lp', { data: 'wake' });
  const woke = await waiting;
  t.same(
    woke.body.events.map((e) => e.id),
    [published.body.id],
  );
  t.ok(woke.at - start < 5000, 'returned at the event, not at the timeout');
});

t.test('resume with Last-Event-ID and ?after delivers exactly the rest, across a restart', async (t) => {
  const dbUrl = await testDatabase(t);
  let server = await startTestServer(t, dbUrl);
  const ids: string[] = [];
  for (let i = 0; i < 6; i++) ids.push((await publish(server.url, 'r', { data: i })).body.id);
  await server.close();
  server = await startTestServer(t, dbUrl);
  for (let i = 6; i < 8; i++) ids.push((await publish(server.url, 'r', { data: i })).body.id);

  const byHeader = await openSse(t, `${server.url}/v1/streams/r/events`, { 'last-event-id': ids[2] });
  t.same(
    (await byHeader.waitFor(5)).map((m) => m.id),
    ids.slice(3),
  );
  const byQuery = await openSse(t, `${server.url}/v1/streams/r/events?after=${ids[4]}`);
  t.same(
    (await byQuery.waitFor(3)).map((m) => m.id),
    ids.slice(5),
  );
  const fromStart = await openSse(t, `${server.url}/v1/streams/r/events?from=earliest`);
  t.same(
    (await fromStart.waitFor(8)).map((m) => m.data),
    ids.map((_, i) => String(i)),
  );
  // The header wins over ?after (what EventSource sends on reconnect to the same URL).
  const both = await openSse(t, `${server.url}/v1/streams/r/events?after=${ids[0]}`, {
    'last-event-id': ids[6],
  });
  t.same(
    (await both.waitFor(1)).map((m) => m.id),
    [ids[7]],
  );
  await sleep(100);
  for (const r of [byHeader, byQuery, fromStart, both])
    t.equal(
      r.received.length,
      r === byHeader ? 5 : r === byQuery ? 3 : r === fromStart ? 8 : 1,
      'no extra events',
    );
});

t.test(
  'priming: a live subscriber that drops before its first event resumes from its connect point',
  async (t) => {
    const server = await startTestServer(t, await testDatabase(t));
    await publish(server.url, 'p', { data: 'before connect' });
    const live = await openSse(t, `${server.url}/v1/streams/p/events`);
    const primed = live.primed!;
    live.close();
    const missed = await publish(server.url, 'p', { data: 'while away' });
    const again = await openSse(t, `${server.url}/v1/streams/p/events`, { 'last-event-id': primed });
    const [m] = await again.waitFor(1);
    t.equal(m.id, missed.body.id);
    t.equal(m.data, '"while away"');
  },
);

t.test('several streams on one connection, one cursor', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const sse = await openSse(t, `${server.url}/v1/events?stream=a&stream=b&from=earliest`);
  const a1 = await publish(server.url, 'a', { data: 1 });
  await publish(server.url, 'c', { data: 'no' });
  const b1 = await publish(server.url, 'b', { data: 2 });
  const a2 = await publish(server.url, 'a', { data: 3 });
  // On several streams an event's id names its stream after the cursor.
  t.same(
    (await sse.waitFor(3)).map((m) => m.id),
    [`${a1.body.id}/a`, `${b1.body.id}/b`, `${a2.body.id}/a`],
  );
  const json = await fetch(`${server.url}/v1/events?stream=a&stream=b&after=${a1.body.id}`);
  t.same(
    ((await json.json()) as { events: { id: string }[] }).events.map((e) => e.id),
    [b1.body.id, a2.body.id],
  );
});

t.test('catch-up from the table hands over to the live window without gap or duplicate', async (t) => {
  // A tiny window forces the subscriber through the table, while publishing continues.
  const server = await startTestServer(t, await testDatabase(t), { windowEvents: 100, pageSize: 50 });
  const expected: string[] = [];
  for (let i = 0; i < 10; i++) {
    const res = await publish(
      server.url,
      'cu',
      Array.from({ length: 100 }, (_, j) => ({ data: i * 100 + j })),
    );
    expected.push(...res.body.events!.map((e) => e.id));
  }
  const sse = await openSse(t, `${server.url}/v1/streams/cu/events?from=earliest`);
  const writer = (async () => {
    for (let i = 0; i < 40; i++) {
      const res = await publish(server.url, 'cu', [{ data: `live${i}a` }, { data: `live${i}b` }]);
      expected.push(...res.body.events!.map((e) => e.id));
      await sleep(5);
    }
  })();
  await writer;
  const got = await sse.waitFor(expected.length, 20000);
  t.same(
    got.map((m) => m.id),
    expected,
    'every event once, in order',
  );
  await sleep(200);
  t.equal(sse.received.length, expected.length, 'nothing repeated afterwards');
});

t.test('a slow reader is bounded and loses nothing once it reads again', async (t) => {
  // The slow-reader drops (test/slow-readers.test.ts) are kept out of the way: this socket reads
  // nothing for as long as the 20 publishes take, which on a loaded machine is past both the
  // timeout and the in-flight rule, and a dropped reader would resume with Last-Event-ID instead.
  const server = await startTestServer(t, await testDatabase(t), {
    windowEvents: 200,
    slowSubscriberMaxMs: 600_000,
    sseMaxInFlightBytes: 256 * 1024 * 1024,
  });
  // A raw socket that does not read: its kernel buffers fill, the server stops writing to it.
  const net = await import('node:net');
  const { port } = new URL(server.url);
  const sock = net.connect(Number(port), '127.0.0.1');
  await new Promise((r) => sock.once('connect', r));
  sock.write(
    'GET /v1/streams/slow/events?from=earliest HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n',
  );
  sock.pause();
  t.teardown(() => sock.destroy());
  const big = 'x'.repeat(2000);
  const ids: string[] = [];
  for (let i = 0; i < 20; i++) {
    const res = await publish(
      server.url,
      'slow',
      Array.from({ length: 100 }, (_, j) => ({ data: { i, j, big } })),
    );
    ids.push(...res.body.events!.map((e) => e.id));
  }
  await sleep(300);
  // Now read everything: each event exactly once.
  let text = '';
  sock.setEncoding('utf8');
  sock.on('data', (d: string) => {
    text += d;
  });
  sock.resume();
  const deadline = Date.now() + 20000;
  while ((text.match(/^id: \d+-\d+\.\w+\ndata/gm) ?? []).length < ids.length && Date.now() < deadline)
    await sleep(50);
  const got = [...text.matchAll(/^id: (\d+-\d+\.\w+)\ndata/gm)].map((m) => m[1]);
  t.equal(got.length, ids.length, 'all events arrived');
  t.same(got, ids, 'in order, once');
});
