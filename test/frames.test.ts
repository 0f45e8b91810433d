// SSE frames are built in two places (src/feed/frames.ts): in JavaScript for live fan-out and by
// PostgreSQL for catch-up pages. A subscriber must get the same bytes either way, including for data
// written by raw SQL with newlines in it, and paging by bytes must neither skip nor repeat an event.
import { sql } from 'kysely';
import t from 'tap';
import { migrate } from '../src/db/migrate.ts';
import { CommitfeedClient } from '../src/client/index.ts';
import { START } from '../src/feed/cursor.ts';
import { lastFrameCursor, namedSseFrame, sseFrame } from '../src/feed/frames.ts';
import { currentHorizon } from '../src/feed/queries/current-horizon.ts';
import { readRange } from '../src/feed/queries/read-range.ts';
import { readRangeFrames } from '../src/feed/queries/read-range-frames.ts';
import { feedRows, openSse, publish, sqlClient, startTestServer, testDatabase } from './helpers.ts';

const DATA = [
  '{"n":1}',
  '{\n  "pretty": true\n}',
  '{"a":\r\n1,\r"b":2}',
  '"line\\nbreak escaped, not raw"',
  '{"unicode":"é 😀 \\u2028"}',
  'null',
  '[1,\n2]',
];

t.test('PostgreSQL builds the same frames as sseFrame(), page by page', async (t) => {
  const db = sqlClient(t, await testDatabase(t));
  await migrate(db);
  for (const [i, data] of DATA.entries()) {
    await sql`insert into commitfeed.feed (stream, type, data)
              values ('f', ${i % 2 === 0 ? null : `type-${i}`}, ${data}::json)`.execute(db);
  }
  await sql`insert into commitfeed.feed (stream, data) values ('other', '{"not":"mine"}')`.execute(db);
  const upTo = await currentHorizon(db);
  const { events } = await readRange(db, ['f'], START, upTo, 100);
  t.equal(events.length, DATA.length);
  const expected = events.map((e) => sseFrame(e)).join('');
  t.match(expected, /data: \{ {3}"pretty": true \}\n/, 'raw newlines in data became spaces');

  const whole = await readRangeFrames(db, ['f'], START, upTo, 100, 1 << 20);
  t.equal(whole.frames, expected, 'identical bytes for the whole stream');
  t.equal(whole.count, DATA.length);
  t.notOk(whole.more, 'nothing more before upTo');
  t.same(whole.last, events[events.length - 1] && { txid: events.at(-1)!.txid, id: events.at(-1)!.id });

  // With the feed's tag, as a server reads them: every id ends with it, the same bytes either way.
  const tagged = await readRange(db, ['f', 'other'], START, upTo, 100, '.0123abcd');
  t.match(sseFrame(tagged.events[0]), /^id: \d+-\d+\.0123abcd\n/, 'the id carries the tag');
  for (const [streams, frame] of [
    [['f'], sseFrame],
    [['f', 'other'], namedSseFrame],
  ] as const) {
    const js = (await readRange(db, streams, START, upTo, 100, '.0123abcd')).events
      .map((e) => frame(e))
      .join('');
    const fromSql = await readRangeFrames(db, streams, START, upTo, 100, 1 << 20, '.0123abcd');
    t.equal(fromSql.frames, js, `tagged, ${streams.length} stream(s): identical bytes`);
    t.same(fromSql.last, lastFrameCursor(js), 'the last cursor read back without its tag');
  }

  const two = await readRangeFrames(db, ['f', 'other'], START, upTo, 100, 1 << 20);
  t.equal(two.count, DATA.length + 1, 'several streams: both read');
  // Several streams: each frame's id names its stream, the same bytes from SQL as from namedSseFrame().
  const both = (await readRange(db, ['f', 'other'], START, upTo, 100)).events;
  const expectedNamed = both.map((e) => namedSseFrame(e)).join('');
  t.equal(two.frames, expectedNamed, 'several streams: identical bytes, ids naming the stream');
  t.match(expectedNamed, /^id: \d+-\d+\/f\ndata: \{"n":1\}\n\n/, 'the id is <cursor>/<stream>');
  t.match(expectedNamed, /\nid: \d+-\d+\/other\ndata: \{"not":"mine"\}\n\n$/);
  t.same(lastFrameCursor(expectedNamed), both.at(-1) && { txid: both.at(-1)!.txid, id: both.at(-1)!.id });
  t.equal(
    namedSseFrame(both[1]).replace(/^id: [^\n]*/, ''),
    sseFrame(both[1]).replace(/^id: [^\n]*/, ''),
    'only the id line differs between the two forms',
  );

  // Paging: every event once, in order, across pages.
  for (const limit of [1, 2, 3, 100]) {
    let after = START;
    let out = '';
    let pages = 0;
    for (;;) {
      const page = await readRangeFrames(db, ['f'], after, upTo, limit, 1 << 20);
      pages++;
      out += page.frames;
      if (!page.more) break;
      t.same(lastFrameCursor(page.frames!), page.last, 'last is the last frame');
      after = page.last!;
      if (pages > 50) break;
    }
    t.equal(out, expected, `limit ${limit}: same bytes in ${pages} pages`);
  }
  // The same paging over several streams, where ids name the stream.
  for (const limit of [1, 3]) {
    let after = START;
    let out = '';
    for (let pages = 0; pages <= 50; pages++) {
      const page = await readRangeFrames(db, ['f', 'other'], after, upTo, limit, 1 << 20);
      out += page.frames;
      if (!page.more) break;
      t.same(lastFrameCursor(page.frames!), page.last, 'last is the last (named) frame');
      after = page.last!;
    }
    t.equal(out, expectedNamed, `several streams, limit ${limit}: same bytes across pages`);
  }

  // A frame over the size bound: no frames (the caller reads rows), but the count and `more` hold.
  const big = await readRangeFrames(db, ['f'], START, upTo, 3, 30);
  t.equal(big.frames, null, 'a frame larger than the bound: no frames string');
  t.equal(big.count, 3);
  t.ok(big.more);
});

t.test('a catch-up over large events is served as rows, chunk by chunk, with nothing lost', async (t) => {
  const url = await testDatabase(t);
  const server = await startTestServer(t, url);
  const db = sqlClient(t, url);
  // 40 events of ~100 KB (over the 64 KB frame bound) between small ones.
  await sql`insert into commitfeed.feed (stream, data)
            select 'big', json_build_object('n', g, 'pad', case when g % 2 = 0 then repeat('x', 100000) else '' end)
            from generate_series(1, 80) g`.execute(db);
  await server.feed.tailer.settled();
  const sse = await openSse(t, `${server.url}/v1/streams/big/events?from=earliest`);
  const got = (await sse.waitFor(80, 20000)).map((m) => (JSON.parse(m.data ?? 'null') as { n: number }).n);
  t.same(
    got,
    Array.from({ length: 80 }, (_, i) => i + 1),
    'every event once, in order',
  );
});

t.test('a connection to several streams gets ids naming the stream, live and in catch-up', async (t) => {
  const url = await testDatabase(t);
  const server = await startTestServer(t, url);
  const db = sqlClient(t, url);
  // Catch-up served as rows (events over the 64 KB frame bound) and as SQL-built frames (small ones).
  await sql`insert into commitfeed.feed (stream, data)
            select case when g % 2 = 0 then 'a' else 'b' end,
                   json_build_object('n', g, 'pad', case when g % 3 = 0 then repeat('x', 100000) else '' end)
            from generate_series(1, 12) g`.execute(db);
  await server.feed.tailer.settled();
  const multi = await openSse(t, `${server.url}/v1/events?stream=a&stream=b&from=earliest`);
  const single = await openSse(t, `${server.url}/v1/streams/a/events?from=earliest`);
  await multi.waitFor(12, 20000);
  await single.waitFor(6, 20000);
  // Live: one event fanned out to both connections, each in its own form.
  await publish(server.url, 'a', { data: { n: 13 }, type: 'live' });
  const [m] = (await multi.waitFor(13, 10000)).slice(12);
  const [s1] = (await single.waitFor(7, 10000)).slice(6);
  const rows = await feedRows(db);
  t.same(
    multi.received.map((e) => e.id),
    rows.map((r) => `${r.cursor}/${r.stream}`),
    'several streams: every id is <cursor>/<stream>, in feed order, catch-up and live',
  );
  t.same(
    single.received.map((e) => e.id),
    rows.filter((r) => r.stream === 'a').map((r) => r.cursor),
    'one stream: plain cursors',
  );
  t.equal(m.event, 'live', 'the event name is the published type');
  t.equal(m.data, s1.data, 'the same data on both');
  multi.close();
  single.close();

  // Resuming with such an id (as EventSource sends it back) continues after its cursor.
  const resumed = await openSse(t, `${server.url}/v1/events?stream=a&stream=b`, {
    'last-event-id': multi.received[9].id!,
  });
  t.equal(resumed.status, 200, 'Last-Event-ID naming a stream is accepted');
  t.same(
    (await resumed.waitFor(3, 10000)).map((e) => e.id),
    multi.received.slice(10).map((e) => e.id),
    'resumed right after it',
  );
  resumed.close();
  const after = await fetch(
    `${server.url}/v1/events?stream=a&stream=b&after=${encodeURIComponent(multi.received[11].id!)}`,
  );
  t.equal(after.status, 200, '?after= takes the same id');
  t.same(
    ((await after.json()) as { events: { id: string }[] }).events.map((e) => e.id),
    [rows[12].cursor],
    'JSON reads list plain cursors (each event has its stream property)',
  );
});

t.test("the TypeScript client reports each event's stream and a plain cursor", async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const cf = new CommitfeedClient(server.url);
  const a = await cf.publish('a', { i: 0 });
  const b = await cf.publish('b', { i: 1 }, { type: 'created' });
  const read = async (streams: string | string[], n: number) => {
    const sub = cf.subscribe<{ i: number }>(streams, { from: 'earliest' });
    t.teardown(() => sub.close());
    const out: { id: string; stream: string; type: string; i: number }[] = [];
    const timer = setTimeout(() => sub.close(), 10000);
    for await (const e of sub) {
      out.push({ id: e.id, stream: e.stream, type: e.type, i: e.data.i });
      if (out.length === n) break;
    }
    clearTimeout(timer);
    t.equal(out.length, n, `${n} events within 10 s`);
    return { out, lastId: sub.lastId };
  };
  const both = await read(['a', 'b'], 2);
  t.same(
    both.out,
    [
      { id: a.id, stream: 'a', type: 'message', i: 0 },
      { id: b.id, stream: 'b', type: 'created', i: 1 },
    ],
    'several streams: the stream from the id, the id a plain cursor',
  );
  t.equal(both.lastId, b.id, 'lastId is the plain cursor');
  const one = await read('b', 1);
  t.same(one.out, [{ id: b.id, stream: 'b', type: 'created', i: 1 }], 'one stream: its name');
});
