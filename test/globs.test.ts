import t from 'tap';
import { globRegExp } from '../src/streams/glob.ts';
import { compareCursors, parseCursor } from '../src/feed/cursor.ts';
import { openSse, publish, startTestServer, testDatabase, until } from './helpers.ts';

t.test('the glob grammar matches names only, never internal streams', async (t) => {
  const cases: [string, string, boolean][] = [
    ['orders.*', 'orders.eu', true],
    ['orders.*', 'orders.', true],
    ['orders.*', 'ordersXeu', false],
    ['*.created', 'orders.created', true],
    ['*', 'anything:at-all_1.2', true],
    ['*', 'queue/emails', false],
    ['*', 'mercure/updates', false],
    ['mercure*', 'mercure/updates', false],
    ['queue*', 'queue/x', false],
  ];
  for (const [glob, name, want] of cases) t.equal(globRegExp(glob).test(name), want, `${glob} ~ ${name}`);
});

t.test('stream=orders.* on /v1/events: catch-up, live, new streams, no internal streams', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const base = server.url;
  const a = await publish(base, 'orders.eu', { data: { n: 1 } });
  await publish(base, 'invoices', { data: { n: 2 } });
  await publish(base, 'orders.us', { data: { n: 3 } });
  // A Mercure update and a queue job: internal streams a `*` glob must never show.
  await fetch(`${base}/.well-known/mercure`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: 'topic=urn%3Ax&data=secret',
  });
  await fetch(`${base}/v1/queues/emails/jobs`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ payload: { to: 'x' } }),
  });
  const glob = await openSse(t, `${base}/v1/events?stream=orders.*&from=earliest`);
  const star = await openSse(t, `${base}/v1/events?stream=*&from=earliest`);
  t.equal(glob.status, 200);
  t.same(
    (await glob.waitFor(2)).map((m) => [m.id?.split('/')[1], m.data]),
    [
      ['orders.eu', '{"n":1}'],
      ['orders.us', '{"n":3}'],
    ],
    'catch-up',
  );
  await publish(base, 'orders.new', { data: { n: 4 } });
  await publish(base, 'other', { data: { n: 5 } });
  await publish(base, 'orders.eu', { data: { n: 6 } });
  t.same(
    (await glob.waitFor(4)).slice(2).map((m) => m.data),
    ['{"n":4}', '{"n":6}'],
    'live, including a stream that did not exist at connect',
  );
  const all = (await star.waitFor(6)).map((m) => m.id?.split('/')[1]);
  t.same(
    all,
    ['orders.eu', 'invoices', 'orders.us', 'orders.new', 'other', 'orders.eu'],
    '* shows native streams only',
  );
  // Resume from the first event's id: everything after it, once.
  const resumed = await openSse(t, `${base}/v1/events?stream=orders.*`, {
    'last-event-id': `${a.body.id}/orders.eu`,
  });
  t.same(
    (await resumed.waitFor(3)).map((m) => m.data),
    ['{"n":3}', '{"n":4}', '{"n":6}'],
  );
  const json = await fetch(`${base}/v1/events?stream=orders.*`);
  t.equal(json.status, 400, 'JSON reads take names only');
  t.equal(((await json.json()) as { code: string }).code, 'glob_needs_sse');
  const bad = await fetch(`${base}/v1/events?stream=orders/*`, { headers: { accept: 'text/event-stream' } });
  t.equal(bad.status, 400, 'a / is not part of the grammar');
  await bad.body?.cancel();
});

t.test('a glob read behind retention gets the reset frame first, then what retention holds', async (t) => {
  const DAY = 86_400_000;
  const todayUtc = Math.floor(Date.now() / DAY) * DAY;
  const url = await testDatabase(t);
  const retention = {
    janitorIntervalMs: 0,
    partitionIntervalMs: 3_600_000,
    partitionPremake: 3,
    retentionMs: DAY,
  };
  const server = await startTestServer(t, url, retention);
  const old = [];
  for (let i = 0; i < 2; i++)
    old.push((await publish(server.url, 'orders.eu', { data: `old ${i}` })).body.id);
  // The clock a retention past the end of today: today's partition (and all before it) is dropped.
  const run = await server.janitor.runOnce(new Date(todayUtc + 2 * DAY));
  t.ok(run.dropped.length >= 1, 'partitions dropped');
  await publish(server.url, 'orders.us', { data: 'new 0' });
  await publish(server.url, 'invoices', { data: 'not matched' });
  const last = await publish(server.url, 'orders.eu', { data: 'new 1' });
  // A second instance on the same database: its window is empty, so the glob's catch-up reads the table.
  const other = await startTestServer(t, url, retention);
  await until(
    () => compareCursors(other.feed.tailer.position, parseCursor(last.body.id)!) >= 0,
    10000,
    'the tailer to reach the last event',
  );
  const ways: [string, Record<string, string>][] = [
    ['&from=earliest', {}],
    ['', { 'last-event-id': `${old[0]}/orders.eu` }],
  ];
  for (const [query, headers] of ways) {
    const s = await openSse(t, `${other.url}/v1/events?stream=orders.*${query}`, headers);
    const got = await s.waitFor(3);
    t.same(
      got.map((m) => [m.event, m.data]),
      [
        ['reset', JSON.stringify({ reason: 'trimmed', resumeFrom: old[1] })],
        [undefined, '"new 0"'],
        [undefined, '"new 1"'],
      ],
      `${query || 'Last-Event-ID'}: reset to the trim mark first, then each retained match once`,
    );
  }
});
