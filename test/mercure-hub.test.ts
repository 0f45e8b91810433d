import t from 'tap';
import { openSse, sqlClient, startTestServer, testDatabase } from './helpers.ts';
import { sql } from 'kysely';

const HUB = '/.well-known/mercure';

async function post(base: string, body: string | URLSearchParams, headers: Record<string, string> = {}) {
  const res = await fetch(`${base}${HUB}`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
    body: typeof body === 'string' ? body : body.toString(),
  });
  return { status: res.status, type: res.headers.get('content-type'), text: await res.text() };
}

function form(pairs: [string, string][]): URLSearchParams {
  const f = new URLSearchParams();
  for (const [k, v] of pairs) f.append(k, v);
  return f;
}

function subUrl(base: string, pairs: [string, string][]): string {
  return `${base}${HUB}?${form(pairs).toString()}`;
}

t.test('publish: 200 text/plain with a generated urn:uuid, or the given id (P6, P8)', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const a = await post(
    server.url,
    form([
      ['topic', 'https://example.com/books/1'],
      ['data', '{"a":1}'],
    ]),
  );
  t.equal(a.status, 200);
  t.equal(a.type, 'text/plain; charset=utf-8');
  t.match(a.text, /^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  const b = await post(
    server.url,
    form([
      ['topic', 'x'],
      ['id', 'my-id'],
      ['unknown', '1'],
    ]),
  );
  t.same([b.status, b.text], [200, 'my-id'], 'a custom id is echoed; unknown fields are ignored');
  const c = await post(
    server.url,
    form([
      ['topic', 'x'],
      ['id', ''],
    ]),
  );
  t.match(c.text, /^urn:uuid:/, 'an empty id counts as absent');
  const json = await fetch(`${server.url}${HUB}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{"topic":"x"}',
  });
  t.equal(json.status, 415, 'a JSON body is not a publish');
});

t.test('publish: every violation of the draft is a 400 and stores nothing (P1-P7)', async (t) => {
  const url = await testDatabase(t);
  const server = await startTestServer(t, url);
  const cases: [string, string | [string, string][]][] = [
    ['no topic', [['data', 'x']]],
    ['not UTF-8', 'topic=%FF'],
    ['not UTF-8 in data', 'topic=a&data=%C3%28'],
    ['U+202E', [['topic', 'a\u202eb']]],
    ['U+200B', [['topic', 'a\u200bb']]],
    ['newline in topic', [['topic', 'a\nb']]],
    ['NUL in topic', [['topic', 'a\u0000b']]],
    ['C1 in topic', [['topic', 'a\u0085b']]],
    ['*', [['topic', '*']]],
    [
      '* as alternate',
      [
        ['topic', 'a'],
        ['topic', '*'],
      ],
    ],
    [
      'type=mercure',
      [
        ['topic', 'a'],
        ['type', 'mercure'],
      ],
    ],
    [
      'type with newline',
      [
        ['topic', 'a'],
        ['type', 'a\nb'],
      ],
    ],
    [
      'id=#x',
      [
        ['topic', 'a'],
        ['id', '#x'],
      ],
    ],
    [
      'id=earliest',
      [
        ['topic', 'a'],
        ['id', 'earliest'],
      ],
    ],
    [
      'id with CR',
      [
        ['topic', 'a'],
        ['id', 'a\rb'],
      ],
    ],
    [
      'retry=1a',
      [
        ['topic', 'a'],
        ['retry', '1a'],
      ],
    ],
    [
      'retry=-1',
      [
        ['topic', 'a'],
        ['retry', '-1'],
      ],
    ],
    ...(
      [
        '',
        'mercure/x',
        './mercure',
        'foo:/.well-known/mercure',
        'https://evil/.well-known/mercure',
        '/.well-known\\mercure\\x',
        '/.well-known/%2e/mercure/z',
        '/.well-known/%6Dercure/x',
        '/.well-known/mercure',
        'https://example.com/.well-known/mercure/subscriptions/exact/x/y',
      ] as const
    ).map((topic): [string, [string, string][]] => [`reserved ${JSON.stringify(topic)}`, [['topic', topic]]]),
  ];
  for (const [name, body] of cases) {
    const r = await post(server.url, typeof body === 'string' ? body : form(body));
    t.equal(r.status, 400, `${name}: ${r.text}`);
    t.match(JSON.parse(r.text), { code: String }, `${name}: a stable code`);
  }
  const db = sqlClient(t, url);
  const { rows } = await sql<{ n: string }>`select count(*)::text as n from commitfeed.feed`.execute(db);
  t.equal(rows[0].n, '0', 'nothing was stored');
  for (const ok of [
    '/.well-known/mercurex',
    'urn:x:/.well-known/mercure',
    '../mercure',
    'https://example.com/a',
  ]) {
    t.equal((await post(server.url, form([['topic', ok]]))).status, 200, `${ok} is not reserved`);
  }
});

t.test('publish: limits answer 413 (P8)', async (t) => {
  const server = await startTestServer(t, await testDatabase(t), { maxEventBytes: 1000 });
  const many = Array.from({ length: 33 }, (_, i): [string, string] => ['topic', `t${i}`]);
  t.equal((await post(server.url, form(many))).status, 413, '33 topics');
  t.equal((await post(server.url, form([['topic', 'x'.repeat(2049)]]))).status, 413, 'a long topic');
  t.equal(
    (
      await post(
        server.url,
        form([
          ['topic', 'a'],
          ['data', 'x'.repeat(1001)],
        ]),
      )
    ).status,
    413,
    'data',
  );
  t.equal(
    (
      await post(
        server.url,
        form([
          ['topic', 'a'],
          ['retry', '12345678901'],
        ]),
      )
    ).status,
    413,
    'retry',
  );
  t.equal(
    (
      await post(
        server.url,
        form([
          ['topic', 'a'],
          ['id', 'i'.repeat(1025)],
        ]),
      )
    ).status,
    413,
    'id',
  );
});

t.test(
  'subscribe: exact, URL pattern, *, alternates; once per connection; exact frames (S3, M1, P4)',
  async (t) => {
    const server = await startTestServer(t, await testDatabase(t));
    const base = server.url;
    const s = await openSse(
      t,
      subUrl(base, [
        ['match', 'https://example.com/books/1'],
        ['match_urlpattern', 'https://example.com/books/:id'],
        ['match_exact', 'urn:alt'],
      ]),
    );
    t.equal(s.status, 200);
    const star = await openSse(t, subUrl(base, [['match_urlpattern', '*']]));
    await post(
      base,
      form([
        ['topic', 'https://example.com/books/1'],
        ['data', 'one'],
        ['id', 'u1'],
      ]),
    );
    await post(
      base,
      form([
        ['topic', 'https://example.com/other'],
        ['data', 'no'],
      ]),
    );
    await post(
      base,
      form([
        ['topic', 'https://example.com/other'],
        ['topic', 'urn:alt'],
        ['data', 'alt'],
      ]),
    );
    await post(
      base,
      form([
        ['topic', 'https://example.com/books/2'],
        ['data', 'a\nevent: x\nid: y\r\nz\rw'],
        ['type', 'upd'],
        ['retry', '5'],
      ]),
    );
    await post(base, form([['topic', 'https://example.com/books/3']]));
    const got = await s.waitFor(4);
    t.same(
      got.map((m) => [m.id, m.event, m.data]),
      [
        ['u1', undefined, 'one'],
        [got[1].id, undefined, 'alt'],
        [got[2].id, 'upd', 'a\nevent: x\nid: y\nz\nw'],
        [got[3].id, undefined, ''],
      ],
    );
    await star.waitFor(5);
    t.equal(star.received.length, 5, '* receives every update');
    // A last update only one matcher takes: once it arrives, everything before it has.
    await post(
      base,
      form([
        ['topic', 'urn:alt'],
        ['data', 'last'],
      ]),
    );
    t.same(
      (await s.waitFor(5)).map((m) => m.data),
      ['one', 'alt', 'a\nevent: x\nid: y\nz\nw', '', 'last'],
      'each update once, however many matchers match it',
    );
  },
);

t.test('subscribe: bad requests are 400 (S3-S5)', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const bad: string[] = [
    'Match=a',
    'MATCH_exact=a',
    'match_Exact=a',
    'match_regex=a',
    'matches=a',
    'match_urlpattern=%2Fa%2F%3Ax((%3F%3D)a)',
    'match=a%E2%80%8Bb',
    'match=%FF',
    '',
    'foo=1',
    Array.from({ length: 101 }, (_, i) => `match=t${i}`).join('&'),
    `match_urlpattern=${'a'.repeat(1025)}`,
  ];
  for (const q of bad) {
    const res = await fetch(`${server.url}${HUB}?${q}`, { headers: { accept: 'text/event-stream' } });
    t.equal(res.status, 400, q.slice(0, 60));
    await res.body?.cancel();
  }
  const ok = await openSse(t, `${server.url}${HUB}?match=a&foo=1&access_token=x`);
  t.equal(ok.status, 200, 'unknown parameters are ignored');
});

t.test('resume: an id, the header over the query, earliest, an unknown id (R1-R3)', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const base = server.url;
  for (const [id, data] of [
    ['a', '1'],
    ['b', '2'],
    ['a', '3'],
    ['c', '4'],
  ]) {
    t.equal(
      (
        await post(
          base,
          form([
            ['topic', 'urn:t'],
            ['id', id],
            ['data', data],
          ]),
        )
      ).status,
      200,
    );
  }
  const fromB = await openSse(
    t,
    subUrl(base, [
      ['match', 'urn:t'],
      ['last_event_id', 'b'],
    ]),
  );
  t.same(
    (await fromB.waitFor(2)).map((m) => m.data),
    ['3', '4'],
  );
  const res = await fetch(
    subUrl(base, [
      ['match', 'urn:t'],
      ['last_event_id', 'b'],
    ]),
    {
      headers: { accept: 'text/event-stream', 'last-event-id': 'c' },
    },
  );
  t.equal(res.headers.get('mercure-last-event-id'), 'c', 'the header wins over the query');
  await res.body?.cancel();
  const reused = await openSse(
    t,
    subUrl(base, [
      ['match_urlpattern', '*'],
      ['last_event_id', 'a'],
    ]),
  );
  t.same(
    (await reused.waitFor(3)).map((m) => m.data),
    ['2', '3', '4'],
    'a reused id means its first use',
  );
  const earliest = await openSse(
    t,
    subUrl(base, [
      ['match', 'urn:t'],
      ['last_event_id', 'earliest'],
    ]),
  );
  t.same(
    (await earliest.waitFor(4)).map((m) => m.data),
    ['1', '2', '3', '4'],
  );
  const unknown = await fetch(subUrl(base, [['match', 'urn:t']]), {
    headers: { accept: 'text/event-stream', 'last-event-id': 'nope' },
  });
  t.equal(unknown.headers.get('mercure-last-event-id'), 'earliest', 'an unknown id replays from earliest');
  await unknown.body?.cancel();
  const live = await fetch(subUrl(base, [['match', 'urn:t']]), { headers: { accept: 'text/event-stream' } });
  t.equal(live.headers.get('mercure-last-event-id'), null, 'no header without a resume value');
  await live.body?.cancel();
  const primed = await openSse(t, subUrl(base, [['match', 'urn:t']]));
  t.equal(primed.primed, 'c', 'a live stream is primed with the last update id');
});

t.test(
  'commitfeed.mercure_publish in the application transaction: commit delivers, rollback does not',
  async (t) => {
    const url = await testDatabase(t);
    const server = await startTestServer(t, url);
    const db = sqlClient(t, url);
    const s = await openSse(t, subUrl(server.url, [['match', 'urn:tx']]));
    await db
      .transaction()
      .execute((trx) =>
        sql`select commitfeed.mercure_publish('urn:tx', 'rolled back', id => 'rb')`.execute(trx).then(() => {
          throw new Error('rollback');
        }),
      )
      .catch(() => {});
    const id = await db.transaction().execute(async (trx) => {
      const { rows } = await sql<{
        id: string;
      }>`select commitfeed.mercure_publish(array['urn:tx'], 'committed') as id`.execute(trx);
      return rows[0].id;
    });
    const [m] = await s.waitFor(1);
    t.same([m.id, m.data], [id, 'committed']);
    await sql`select commitfeed.mercure_publish('urn:tx', 'after')`.execute(db);
    t.same(
      (await s.waitFor(2)).map((m) => m.data),
      ['committed', 'after'],
      'the rolled-back update was never delivered',
    );
    const res = await fetch(subUrl(server.url, [['match', 'urn:tx']]), {
      headers: { accept: 'text/event-stream', 'last-event-id': 'rb' },
    });
    t.equal(res.headers.get('mercure-last-event-id'), 'earliest', 'its id stays unknown');
    await res.body?.cancel();
  },
);
