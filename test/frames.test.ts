// SSE frames are built in two places (src/feed/frames.ts): in JavaScript for live fan-out and by
// PostgreSQL for catch-up pages. A subscriber must get the same bytes either way, including for data
// written by raw SQL with newlines in it, and paging by bytes must neither skip nor repeat an event.
import { sql } from 'kysely';
import t from 'tap';
import { migrate } from '../src/db/migrate.ts';
import { START } from '../src/feed/cursor.ts';
import { lastFrameCursor, sseFrame } from '../src/feed/frames.ts';
import { currentHorizon, readRange, readRangeFrames } from '../src/feed/queries.ts';
import { openSse, sqlClient, startTestServer, testDatabase } from './helpers.ts';

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

  const two = await readRangeFrames(db, ['f', 'other'], START, upTo, 100, 1 << 20);
  t.equal(two.count, DATA.length + 1, 'several streams: both read');

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
