// Compatibility mode 8 on a real hub: `topic=` selectors (strings and URI Templates) mixed with
// `match`, private updates authorized by 0.x grants live and on catch-up, the 0.x resume spellings and
// their precedence, the token in the URL beside a native `access_token`, the 0.x subscription events
// and API; and without the setting, `topic=` refused even beside `match=` (never silently dropped).
import t from 'tap';
import { openSse, startTestServer, testDatabase } from './helpers.ts';
import { legacyConfigEnv, legacyToken, mercureConfigEnv } from './mercure-helpers.ts';

const HUB = '/.well-known/mercure';
const BOOKS = 'https://example.com/books/{id}';

const url = (base: string, pairs: [string, string][]) => `${base}${HUB}?${new URLSearchParams(pairs)}`;
const bearer = (tok: string) => ({ authorization: `Bearer ${tok}` });

async function post(base: string, tok: string, pairs: [string, string][]): Promise<string> {
  const res = await fetch(`${base}${HUB}`, {
    method: 'POST',
    headers: { ...bearer(tok), 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams(pairs).toString(),
  });
  if (res.status !== 200) throw new Error(`publish: ${res.status} ${await res.text()}`);
  return res.text();
}

/** One compatibility-mode hub with anonymous subscribers, for the tests that need nothing else. */
let shared: ReturnType<typeof startTestServer> | undefined;
const compatHub = () =>
  (shared ??= testDatabase(t).then((db) =>
    startTestServer(t, db, legacyConfigEnv({ mercureAnonymous: true })),
  ));

/** The status, `code` and Mercure-Last-Event-ID of a subscribe request (the stream is dropped). */
async function opening(target: string, headers: Record<string, string> = {}) {
  const abort = new AbortController();
  const res = await fetch(target, { headers, signal: abort.signal });
  const code = res.status === 200 ? undefined : ((await res.json()) as { code: string }).code;
  const resumed = res.headers.get('mercure-last-event-id');
  abort.abort();
  return { status: res.status, code, resumed };
}

t.test('without the setting, topic= is a 400, even beside match=', async (t) => {
  const server = await startTestServer(
    t,
    await testDatabase(t),
    mercureConfigEnv({ mercureAnonymous: true }),
  );
  for (const pairs of [
    [
      ['topic', 'x'],
      ['match', 'y'],
    ],
    [['topic', BOOKS]],
    [['Topic', 'x']],
  ] as [string, string][][]) {
    const r = await opening(url(server.url, pairs));
    t.same([r.status, r.code], [400, 'unsupported_matcher'], JSON.stringify(pairs));
  }
  const res = await fetch(url(server.url, [['topic', 'x']]));
  t.match(((await res.json()) as { message: string }).message, /MERCURE_PROTOCOL_COMPATIBILITY=8/);
  const old = await opening(
    url(server.url, [
      ['match', 'x'],
      ['lastEventID', 'earliest'],
    ]),
  );
  t.same([old.status, old.resumed], [200, null], 'lastEventID means nothing in 1.0 mode');
});

t.test('topic= selectors: strings and URI Templates, mixed with match, private ones by grants', async (t) => {
  const server = await compatHub();
  const publisher = await legacyToken({ mercure: { publish: ['*'] } });
  const reader = await legacyToken({ mercure: { subscribe: [BOOKS] } });
  const pairs: [string, string][] = [
    ['topic', BOOKS],
    ['topic', 'plain-string'],
    ['match', 'https://example.com/authors/1'],
  ];
  const s = await openSse(t, url(server.url, pairs), bearer(reader));
  const anon = await openSse(t, url(server.url, pairs));
  t.same([s.status, anon.status], [200, 200]);
  const sent: [string, boolean][] = [
    ['https://example.com/books/1', false],
    ['https://example.com/books/2', true], // private, granted by the template
    ['https://example.com/books/1/reviews', false], // {id} stops at /
    ['plain-string', false],
    ['https://example.com/authors/1', false],
    ['https://example.com/authors/1', true], // private, not granted
    ['https://example.com/{id}', false],
  ];
  for (const [topic, priv] of sent) {
    const fields: [string, string][] = [
      ['topic', topic],
      ['data', topic],
    ];
    await post(server.url, publisher, priv ? [...fields, ['private', 'on']] : fields);
  }
  await post(server.url, publisher, [
    ['topic', 'plain-string'],
    ['data', 'end'],
  ]); // after it, nothing more comes
  const want = [
    'https://example.com/books/1',
    'https://example.com/books/2',
    'plain-string',
    'https://example.com/authors/1',
    'end',
  ];
  t.same(
    (await s.waitFor(5)).map((m) => m.data),
    want,
  );
  t.same(
    (await anon.waitFor(4)).map((m) => m.data),
    [want[0], want[2], want[3], 'end'],
    'anonymous: public only',
  );

  // Catch-up: exact topic= strings read their topic index, templates the updates stream; both re-check grants.
  const exact = await openSse(
    t,
    url(server.url, [
      ['topic', 'plain-string'],
      ['topic', 'https://example.com/books/2'],
      ['last_event_id', 'earliest'],
    ]),
    bearer(reader),
  );
  t.same(
    (await exact.waitFor(3)).map((m) => m.data),
    ['https://example.com/books/2', 'plain-string', 'end'],
  );
  const replay = await openSse(
    t,
    url(server.url, [
      ['topic', BOOKS],
      ['lastEventID', 'earliest'],
    ]),
  );
  t.same(
    (await replay.waitFor(1)).map((m) => m.data),
    ['https://example.com/books/1'],
    'anonymous replay: public',
  );
  await post(server.url, publisher, [
    ['topic', 'https://example.com/books/9'],
    ['data', 'last'],
  ]);
  t.equal((await replay.waitFor(2))[1].data, 'last', 'then live, nothing private in between');

  t.same([(await opening(url(server.url, [['Topic', 'x']]))).status], [400], 'topic is case-sensitive');
  const bad = await opening(url(server.url, [['topic', 'a\u0001b']]));
  t.same([bad.status, bad.code], [400, 'invalid_matcher']);
  const big = await opening(url(server.url, [['topic', `https://e/{x}${'a'.repeat(1024)}`]]));
  t.same([big.status, big.code], [400, 'invalid_matcher'], 'a template over 1024 characters');
});

t.test('resume: the header, then last_event_id, lastEventID, Last-Event-ID', async (t) => {
  const server = await compatHub();
  const publisher = await legacyToken({ mercure: { publish: ['*'] } });
  for (const id of ['a', 'b', 'c'])
    await post(server.url, publisher, [
      ['topic', 'R'],
      ['id', id],
    ]);
  const resumed = async (pairs: [string, string][], headers: Record<string, string> = {}) =>
    (await opening(url(server.url, [['topic', 'R'], ...pairs]), headers)).resumed;
  t.equal(await resumed([['lastEventID', 'a']]), 'a');
  t.equal(await resumed([['Last-Event-ID', 'b']]), 'b');
  t.equal(
    await resumed([
      ['lastEventID', 'a'],
      ['last_event_id', 'b'],
    ]),
    'b',
    'last_event_id first',
  );
  t.equal(
    await resumed([
      ['Last-Event-ID', 'a'],
      ['lastEventID', 'b'],
    ]),
    'b',
    'then lastEventID',
  );
  t.equal(await resumed([['lastEventID', 'a']], { 'last-event-id': 'c' }), 'c', 'the header wins');
  const s = await openSse(
    t,
    url(server.url, [
      ['topic', 'R'],
      ['lastEventID', 'a'],
    ]),
  );
  t.same(
    (await s.waitFor(2)).map((m) => m.id),
    ['b', 'c'],
    'after a, nothing before',
  );
});

t.test('the token in the URL is read by the hub even beside a native access_token', async (t) => {
  const server = await compatHub(); // anonymous subscribers on: only the token reads the private update
  const publisher = await legacyToken({ mercure: { publish: ['*'] } });
  const reader = await legacyToken({ mercure: { subscribe: ['*'] } });
  const s = await openSse(
    t,
    url(server.url, [
      ['topic', 'P'],
      ['access_token', 'x.y.z'],
      ['authorization', reader],
    ]),
  );
  t.equal(s.status, 200);
  await post(server.url, publisher, [
    ['topic', 'P'],
    ['data', 'secret'],
    ['private', 'on'],
  ]);
  t.equal((await s.waitFor(1))[0].data, 'secret', 'authenticated by ?authorization=');
  const q = await fetch(`${server.url}${HUB}`, {
    method: 'QUERY',
    headers: { ...bearer(reader), 'content-type': 'application/x-www-form-urlencoded' },
    body: 'topic=P&lastEventID=earliest',
  });
  t.equal(q.status, 200, 'QUERY takes topic= in the body too');
  await q.body?.cancel();
});

t.test('0.x subscription events and API for topic= subscriptions; match ones stay 1.0', async (t) => {
  const server = await startTestServer(
    t,
    await testDatabase(t),
    legacyConfigEnv({ mercureSubscriptions: true }),
  );
  const watcherToken = await legacyToken({ mercure: { subscribe: ['*'] } });
  const watcher = await openSse(
    t,
    url(server.url, [
      ['topic', `${HUB}/subscriptions/{topic}/{subscriber}`],
      ['match_urlpattern', `${HUB}/subscriptions/:type/:match/:subscriber`],
    ]),
    bearer(watcherToken),
  );
  t.equal(watcher.status, 200);
  await watcher.waitFor(2); // its own two Mercure subscriptions
  const client = await openSse(
    t,
    url(server.url, [
      ['topic', BOOKS],
      ['match', 'https://example.com/a'],
    ]),
    bearer(await legacyToken({ mercure: { subscribe: ['*'], payload: { who: 'x' } } })),
  );
  t.equal(client.status, 200);
  const events = (await watcher.waitFor(4)).slice(2);
  const v8 = events.find((m) => m.event === undefined)!;
  const v1 = events.find((m) => m.event === 'mercure')!;
  t.equal(v8.event, undefined, '0.x events have no event type');
  const doc = JSON.parse(v8.data ?? '');
  const enc = (s: string) =>
    encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  t.same(doc, {
    '@context': 'https://mercure.rocks/',
    id: `${HUB}/subscriptions/${enc(BOOKS)}/${enc(doc.subscriber)}`,
    type: 'Subscription',
    subscriber: doc.subscriber,
    topic: BOOKS,
    active: true,
    payload: { who: 'x' },
  });
  t.equal(v1.event, 'mercure');
  t.match(JSON.parse(v1.data ?? ''), {
    type: 'subscription',
    match_type: 'exact',
    match: 'https://example.com/a',
  });

  const get = (path: string, tok = watcherToken) => fetch(`${server.url}${path}`, { headers: bearer(tok) });
  const byTopic = await get(`${HUB}/subscriptions/${enc(BOOKS)}`);
  t.equal(byTopic.status, 200);
  t.match(byTopic.headers.get('content-type'), /^application\/ld\+json/);
  t.match(byTopic.headers.get('link'), /rel="mercure"; last-event-id="/);
  const collection = (await byTopic.json()) as Record<string, unknown>;
  const { '@context': _, ...inner } = doc;
  t.same(collection, {
    '@context': 'https://mercure.rocks/',
    id: `${HUB}/subscriptions/${enc(BOOKS)}`,
    type: 'Subscriptions',
    lastEventID: collection.lastEventID,
    subscriptions: [inner],
  });
  t.match(collection.lastEventID, /^urn:uuid:/);
  const one = await get(doc.id);
  t.same(await one.json(), { ...doc, lastEventID: collection.lastEventID });
  t.equal((await get(`${HUB}/subscriptions/${enc(BOOKS)}/urn%3Anone`)).status, 404);
  const denied = await legacyToken({ mercure: { subscribe: ['https://example.com/x'] } });
  t.equal((await get(doc.id, denied)).status, 403, 'the path needs a subscribe grant, as in 0.x');

  const allRes = await get(`${HUB}/subscriptions`);
  t.match(allRes.headers.get('content-type'), /^application\/json/);
  const all = (await allRes.json()) as { type: string; subscriptions: Record<string, unknown>[] };
  t.equal(all.type, 'subscriptions', 'the shared collection keeps the 1.0 document');
  t.same(
    all.subscriptions
      .filter((s) => 'match_type' in s)
      .map((s) => s.match_type)
      .sort(),
    ['exact', 'urlpattern'],
    'the 1.0 subscriptions, in the 1.0 shape',
  );
  // The topic= ones too, as the reference hub lists them: the 0.x document without its @context.
  const legacy = all.subscriptions.filter((s) => 'topic' in s);
  t.same(
    legacy.find((s) => s.topic === BOOKS),
    inner,
    'a topic= subscription in its 0.x shape',
  );
  t.same(
    legacy.map((s) => s.topic).sort(),
    [BOOKS, `${HUB}/subscriptions/{topic}/{subscriber}`].sort(),
    "the client's and the watcher's topic= subscriptions",
  );
  t.equal(all.subscriptions.length, 4, 'every open subscription, each once');
  const v1one = await get(`${HUB}/subscriptions/exact/${enc('https://example.com/a')}`);
  t.equal(
    ((await v1one.json()) as { subscriptions: unknown[] }).subscriptions.length,
    1,
    '1.0 routes unchanged',
  );

  client.close();
  const ended = (await watcher.waitFor(6)).slice(4).find((m) => m.event === undefined);
  t.same(JSON.parse(ended?.data ?? ''), { ...doc, active: false });
});
