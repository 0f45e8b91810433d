import { sql } from 'kysely';
import t from 'tap';
import { mercurePublish } from '../src/index.ts';
import { hasForbiddenChars } from '../src/mercure/form.ts';
import type { CheckedEventInput } from '../src/feed/event.ts';
import { OwnWrites } from '../src/feed/own-writes.ts';
import { appendCheckedEvents } from '../src/feed/queries/append-checked.ts';
import { toEvent } from '../src/feed/queries/event-columns.ts';
import { updateOf } from '../src/mercure/frames.ts';
import { type MercureUpdate, publishedId, reservedTopic, updateEvent } from '../src/mercure/publish.ts';
import { TOPIC_RANGE_SQL, loadMercureIds, readTopicRange } from '../src/mercure/queries.ts';
import { START } from '../src/feed/cursor.ts';
import { openSse, pgClient, sqlClient, startTestServer, testDatabase } from './helpers.ts';

const HUB_URL = 'https://hub.example.com/.well-known/mercure';

t.test('JS and SQL agree on the reserved namespace and forbidden characters', async (t) => {
  const db = sqlClient(t, await testDatabase(t));
  const topics = [
    '',
    'mercure',
    'mercure/x',
    './mercure',
    '../mercure',
    'foo:/.well-known/mercure',
    'https://evil/.well-known/mercure',
    'HTTPS://evil/.well-known/mercure/x',
    '//evil/.well-known/mercure',
    '/.well-known\\mercure\\x',
    '/.well-known/%2e/mercure/z',
    '/.well-known/%2E%2E/.well-known/mercure',
    '/.well-known/%6Dercure/x',
    '/.well-known/%6dercure',
    '/.well-known/mercure?x',
    '/.well-known/mercure#x',
    '?x',
    '#x',
    '/.well-known/mercurex',
    '/.well-known/mercure/../x',
    '/a/../.well-known/./mercure',
    'urn:x',
    'urn:/.well-known/mercure',
    'https://example.com/books/1',
    '/.well-known/%252e/mercure',
    '/.well-known/merc%75re/x',
  ];
  for (const topic of topics) {
    const { rows } = await sql<{ r: boolean }>`select commitfeed.mercure_reserved(${topic}) as r`.execute(db);
    t.equal(rows[0].r, reservedTopic(topic, HUB_URL), `reserved ${JSON.stringify(topic)}`);
  }
  const chars: number[] = [];
  for (let c = 1; c < 0x3000; c++) chars.push(c);
  for (const c of [
    0xfeff, 0xfff9, 0xfffb, 0xfffc, 0x110bd, 0x13430, 0x1343f, 0x1d173, 0xe0001, 0xe0020, 0xe007f, 0xe0080,
  ]) {
    chars.push(c);
  }
  const { rows } = await sql<{ c: number; bad: boolean }>`
    select c, chr(c) ~ '[\\x01-\\x1f\\x7f-\\x9f]' or commitfeed.mercure_invalid(array[chr(c)], null, null, null, true, true) is not null as bad
    from unnest(${chars}::int[]) c`.execute(db);
  const differ = rows.filter((r) => r.bad !== hasForbiddenChars(String.fromCodePoint(r.c)) && r.c !== 0x2a);
  t.same(
    differ.map((r) => r.c.toString(16)),
    [],
    'the same code points are control or format characters',
  );
});

t.test(
  'the library publishes in the caller transaction; /v1/tx publishes atomically with a native event',
  async (t) => {
    const url = await testDatabase(t);
    const server = await startTestServer(t, url);
    const s = await openSse(t, `${server.url}/.well-known/mercure?match=urn%3Alib`);
    const client = await pgClient(t, url);
    await client.query('begin');
    await mercurePublish(client, { topic: 'urn:lib', data: 'rolled back' });
    await client.query('rollback');
    await client.query('begin');
    const id = await mercurePublish(client, { topic: ['urn:lib', 'urn:alt'], data: 'kept', id: 'lib-1' });
    await client.query('commit');
    t.equal(id, 'lib-1');
    await t.rejects(mercurePublish(client, { topic: '*' }), { code: 'reserved_topic' });
    const res = await fetch(`${server.url}/v1/tx`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        ops: [
          { publish: { stream: 'orders', data: { n: 1 } } },
          { mercure: { topic: 'urn:lib', data: 'from tx', private: false } },
        ],
      }),
    });
    t.equal(res.status, 200);
    const body = (await res.json()) as { results: { mercure?: { id: string } }[] };
    t.match(body.results[1].mercure?.id, /^urn:uuid:/);
    const bad = await fetch(`${server.url}/v1/tx`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        ops: [{ publish: { stream: 'orders', data: 2 } }, { mercure: { topic: '/.well-known/mercure/x' } }],
      }),
    });
    t.equal(bad.status, 400, 'a bad mercure op refuses the whole transaction');
    t.same(
      (await s.waitFor(2)).map((m) => m.data),
      ['kept', 'from tx'],
    );
    const db = sqlClient(t, url);
    const { rows } = await sql<{
      n: string;
    }>`select count(*)::text as n from commitfeed.feed where stream = 'orders'`.execute(db);
    t.equal(rows[0].n, '1', 'the refused transaction wrote nothing');
  },
);

t.test('exact-topic catch-up reads the topic indexes, not the whole updates stream', async (t) => {
  const db = sqlClient(t, await testDatabase(t));
  await sql`select commitfeed.mercure_publish('urn:e:' || g::text, 'x') from generate_series(1, 2000) g`.execute(
    db,
  );
  await sql`select commitfeed.mercure_publish(array['urn:f:' || g::text, 'urn:e:' || g::text], 'y')
            from generate_series(1, 2000) g`.execute(db);
  await sql`analyze commitfeed.feed`.execute(db);
  await sql`analyze commitfeed.mercure_topics`.execute(db);
  const { rows: counts } = await sql<{ feed: number; alternates: number }>`
    select (select count(*)::int from commitfeed.feed where topic is not null) as feed,
           (select count(*)::int from commitfeed.mercure_topics) as alternates`.execute(db);
  t.same(counts[0], { feed: 4000, alternates: 2000 }, 'the canonical topic in the row, the others beside it');
  await sql`${sql.raw(`prepare topic_page as ${TOPIC_RANGE_SQL}`)}`.execute(db);
  const { rows } = await sql<{ 'QUERY PLAN': string }>`
    explain execute topic_page(array['urn:e:7'], '0', 0, '999999999', 999999999, 100)`.execute(db);
  const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
  t.match(plan, /topic_txid_id_idx/, plan);
  t.match(plan, /mercure_topics_topic_idx/, plan);
  const page = await readTopicRange(db, ['urn:e:7'], START, { txid: 999_999_999, id: 999_999_999 }, 10);
  t.same(
    page.events.map((e) => e.data),
    [
      JSON.stringify({ topics: ['urn:e:7'], id: JSON.parse(page.events[0].data).id, data: 'x' }),
      JSON.stringify({ topics: ['urn:f:7', 'urn:e:7'], id: JSON.parse(page.events[1].data).id, data: 'y' }),
    ],
    'an update found by its canonical topic, then one by an alternate one, in feed order',
  );
});

t.test('an HTTP publish stores what commitfeed.mercure_append stores, byte for byte', async (t) => {
  const url = await testDatabase(t);
  const db = sqlClient(t, url);
  const updates: MercureUpdate[] = [
    { topics: ['urn:a'], data: 'x', private: false, id: 'p-1', type: null, retry: null },
    {
      topics: ['https://example.com/books/"1"', 'urn:é✓\\', 'urn:é✓\\'],
      data: 'line\nbreak\r\n\u0000 \u2028 "q" \\ 😀',
      private: true,
      id: 'p-2 é',
      type: 'book',
      retry: 9_999_999_999,
    },
    { topics: ['urn:b', 'urn:c'], data: null, private: false, id: 'p-3', type: null, retry: 0 },
    { topics: ['urn:d'], data: '', private: false, id: 'p-4', type: null, retry: null },
  ];
  for (const u of updates) {
    await mercurePublish(db, {
      topic: u.topics,
      data: u.data,
      private: u.private,
      id: u.id,
      type: u.type,
      retry: u.retry,
    });
  }
  const viaSql = await sql<{ stream: string; type: string | null; data: string; mid: string; topic: string }>`
    select stream, type, data::text as data, mid, topic from commitfeed.feed order by txid, id`.execute(db);
  const topicRows = async () =>
    (
      await sql<{ topic: string; mid: string; same: boolean }>`
        select t.topic, f.mid, t.created_at = f.created_at as same
        from commitfeed.mercure_topics t join commitfeed.feed f on (f.txid, f.id) = (t.txid, t.id)
        order by t.txid, t.id, t.topic`.execute(db)
    ).rows;
  const sqlTopics = await topicRows();
  await sql`truncate commitfeed.feed, commitfeed.mercure_topics`.execute(db);
  const own = new OwnWrites(100);
  const events = updates.map((u) => updateEvent(u));
  const results = await appendCheckedEvents(db, events, own);
  const viaHttp = await sql<{
    stream: string;
    type: string | null;
    data: string;
    mid: string;
    topic: string;
  }>`
    select stream, type, data::text as data, mid, topic from commitfeed.feed order by txid, id`.execute(db);
  t.same(viaHttp.rows, viaSql.rows, 'the same rows: stream, type, stored form, id, canonical topic');
  t.same(await topicRows(), sqlTopics, 'the same topic rows, one per distinct other topic, at the row time');
  t.ok(
    sqlTopics.every((r) => r.same),
    'topic rows carry their feed row time',
  );
  t.equal(own.size, updates.length, 'the group commit holds the updates for the tailer');
  const ids = await loadMercureIds(db);
  for (const [i, u] of updates.entries()) {
    const e = toEvent({ ...viaHttp.rows[i], key: null, txid: '1', id: String(i), ms: 0 });
    const { type: _type, ...stored } = u;
    t.same(updateOf(e, ids), stored, 'read back as published');
    t.equal(publishedId(u, results[i].id, ids), u.id, 'the publish answers its id');
  }
});

t.test('a group of keyed native events and Mercure updates is one transaction', async (t) => {
  const url = await testDatabase(t);
  const db = sqlClient(t, url);
  const own = new OwnWrites(100);
  const u: MercureUpdate = {
    topics: ['urn:k'],
    data: 'u',
    private: false,
    id: null,
    type: null,
    retry: null,
  };
  const native = (key: string | null, n: number) =>
    ({ stream: 'k', type: null, key, data: String(n) }) as CheckedEventInput;
  const results = await appendCheckedEvents(db, [native('a', 1), updateEvent(u), native(null, 2)], own);
  t.same(
    results.map((r) => [r.stream, r.duplicate]),
    [
      ['k', false],
      ['mercure/updates', false],
      ['k', false],
    ],
  );
  const { rows } = await sql<{ txids: number }>`
    select count(distinct txid)::int as txids from commitfeed.feed`.execute(db);
  t.equal(rows[0].txids, 1, 'one transaction');
  t.equal(own.size, 0, 'not held: read from the table');
  const bad = await appendCheckedEvents(db, [
    native('b', 3),
    updateEvent({ ...u, id: 'dup' }),
    { stream: 'k', type: null, key: 'c', data: '{not json' } as CheckedEventInput,
  ]).catch((err: Error) => err);
  t.ok(bad instanceof Error, 'a bad event fails the group');
  const after = await sql<{ n: number }>`
    select count(*)::int as n from commitfeed.feed where mid = 'dup' or key = 'b'`.execute(db);
  t.equal(after.rows[0].n, 0, 'and nothing of it was written');
});
