// The hub's routes with real tokens (design §5.6-§5.8, §5.12): publish grants on every topic, private
// updates filtered per subscriber (alternates count, replays re-checked), native tokens refused,
// cookie publishes checked for CSRF, streams closed at exp, and active subscriptions announced as
// private `mercure` events to a watcher.
import { sql } from 'kysely';
import t from 'tap';
import { mintToken } from '../src/auth/tokens.ts';
import { openSse, sqlClient, startTestServer, testDatabase, until } from './helpers.ts';
import { MERCURE_SECRET, mercureConfigEnv, mercureToken } from './mercure-helpers.ts';

const HUB = '/.well-known/mercure';
const APP = 'https://app.example.com';

async function post(base: string, pairs: [string, string][], headers: Record<string, string> = {}) {
  const res = await fetch(`${base}${HUB}`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
    body: new URLSearchParams(pairs).toString(),
  });
  return { status: res.status, challenge: res.headers.get('www-authenticate'), text: await res.text() };
}

const sub = (base: string, pairs: [string, string][]) => `${base}${HUB}?${new URLSearchParams(pairs)}`;
const bearer = (tok: string) => ({ authorization: `Bearer ${tok}` });

t.test('publishing needs a grant on every topic; nothing is stored otherwise', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, {
    ...mercureConfigEnv({ mercurePublishOrigins: [APP] }),
    jwtSecret: MERCURE_SECRET,
  });
  const db = sqlClient(t, dbUrl);
  const stored = async () =>
    Number(
      (
        await sql<{
          n: string;
        }>`select count(*) as n from commitfeed.feed where stream = 'mercure/updates'`.execute(db)
      ).rows[0].n,
    );
  const books = await mercureToken({
    publish: [{ match: 'https://example.com/books/:id', match_type: 'urlpattern' }],
  });
  const two: [string, string][] = [
    ['topic', 'https://example.com/books/1'],
    ['topic', 'https://example.com/authors/1'],
  ];
  const denied = await post(server.url, two, bearer(books));
  t.equal(denied.status, 403, 'one topic of two not granted');
  t.match(denied.challenge, 'error="insufficient_scope"');
  t.equal(await stored(), 0, 'nothing stored');
  t.equal((await post(server.url, [['topic', 'https://example.com/books/1']], bearer(books))).status, 200);

  const none = await post(server.url, [['topic', 'x']]);
  t.equal(none.status, 401);
  t.notMatch(none.challenge, 'error=', 'no token: a bare challenge');
  const native = await mintToken({ secret: MERCURE_SECRET, scopes: { publish: ['*'] }, ttl: '1h' });
  const nat = await post(server.url, [['topic', 'x']], bearer(native));
  t.equal(nat.status, 401, 'a native token on the hub');
  t.match(nat.challenge, 'error="invalid_token"');
  t.equal((await post(server.url, [['topic', 'x']], { authorization: 'Basic x' })).status, 400);

  const cookie = `__Secure-mercure_access_token=${await mercureToken({ publish: ['*'] })}`;
  t.equal((await post(server.url, [['topic', 'x']], { cookie, origin: 'https://evil.example' })).status, 403);
  t.equal(
    (await post(server.url, [['topic', 'x']], { cookie })).status,
    403,
    'a cookie publish without Origin',
  );
  t.equal((await post(server.url, [['topic', 'x']], { cookie, origin: APP })).status, 200);
  t.equal(await stored(), 2);
});

t.test('private updates reach only granted subscribers, live and on replay', async (t) => {
  const server = await startTestServer(
    t,
    await testDatabase(t),
    mercureConfigEnv({ mercureAnonymous: true }),
  );
  const publisher = await mercureToken({ publish: ['*'] });
  const all: [string, string][] = [['match', '*']];
  const narrow = await mercureToken({
    subscribe: [{ match: 'https://example.com/users/42/*', match_type: 'urlpattern' }],
  });
  const other = await mercureToken({ subscribe: ['https://example.com/books/2'] });
  const s42 = await openSse(t, sub(server.url, all), bearer(narrow));
  const sOther = await openSse(t, sub(server.url, all), bearer(other));
  const anon = await openSse(t, sub(server.url, all));
  t.same([s42.status, sOther.status, anon.status], [200, 200, 200]);

  const priv = await post(
    server.url,
    [
      ['topic', 'https://example.com/books/1'],
      ['topic', 'https://example.com/users/42/books/1'],
      ['data', 'secret'],
      ['private', 'false'], // any value: private
    ],
    bearer(publisher),
  );
  t.equal(priv.status, 200);
  const pub = await post(
    server.url,
    [
      ['topic', 'https://example.com/books/1'],
      ['data', 'public'],
    ],
    bearer(publisher),
  );
  t.equal(pub.status, 200);
  t.same(
    (await s42.waitFor(2)).map((m) => m.data),
    ['secret', 'public'],
    'the alternate topic grants it',
  );
  t.same(
    (await sOther.waitFor(1)).map((m) => m.data),
    ['public'],
    'no grant on any topic: public only',
  );
  t.same(
    (await anon.waitFor(1)).map((m) => m.data),
    ['public'],
    'anonymous: public only',
  );
  // The public update arrived after the private one, so the private one was skipped, not late.
  t.equal(sOther.received.length, 1);
  t.equal(anon.received.length, 1);

  const replay = await openSse(t, sub(server.url, [...all, ['last_event_id', 'earliest']]), bearer(other));
  t.same(
    (await replay.waitFor(1)).map((m) => m.data),
    ['public'],
    'a replay is re-checked with the current token',
  );
  const replay42 = await openSse(t, sub(server.url, [...all, ['last_event_id', 'earliest']]), bearer(narrow));
  t.same(
    (await replay42.waitFor(2)).map((m) => m.data),
    ['secret', 'public'],
  );

  const bad = await fetch(sub(server.url, all), {
    headers: { cookie: '__Secure-mercure_access_token=x.y.z' },
  });
  t.equal(bad.status, 401, 'an invalid cookie is refused even when anonymous subscribers are allowed');
  await bad.body?.cancel();
});

t.test('a stream ends when its token expires', async (t) => {
  const server = await startTestServer(t, await testDatabase(t), mercureConfigEnv());
  const exp = Math.floor(Date.now() / 1000) + 2;
  const s = await openSse(
    t,
    sub(server.url, [['match', '*']]),
    bearer(await mercureToken({ subscribe: ['*'], exp })),
  );
  t.equal(s.status, 200);
  let ended = false;
  void s.ended.then(() => {
    ended = true;
  });
  await until(() => ended, 15000, 'the stream to end at exp');
  t.ok(Date.now() >= exp * 1000 - 50, 'not before exp');
});

t.test('active subscriptions: a watcher sees subscriptions start and end', async (t) => {
  const server = await startTestServer(
    t,
    await testDatabase(t),
    mercureConfigEnv({ mercureSubscriptions: true }),
  );
  const watcherToken = await mercureToken({
    // The events and every API resource below the collection; the collection itself, exactly.
    subscribe: [
      { match: '/.well-known/mercure/subscriptions/*', match_type: 'urlpattern' },
      '/.well-known/mercure/subscriptions',
    ],
  });
  const watcher = await openSse(
    t,
    sub(server.url, [['match_urlpattern', '/.well-known/mercure/subscriptions/*']]),
    bearer(watcherToken),
  );
  t.equal(watcher.status, 200);
  const [own] = await watcher.waitFor(1);
  t.equal(own.event, 'mercure', 'its own subscription, as a mercure event');
  const ownDoc = JSON.parse(own.data ?? '');
  t.equal(ownDoc.active, true);

  const client = await openSse(
    t,
    sub(server.url, [['match', 'https://example.com/books/1']]),
    bearer(await mercureToken({ subscribe: ['*'], payload: { tenant: 'acme' } })),
  );
  const [, started] = await watcher.waitFor(2);
  const doc = JSON.parse(started.data ?? '');
  t.match(doc, {
    type: 'subscription',
    match_type: 'exact',
    match: 'https://example.com/books/1',
    active: true,
    payload: { tenant: 'acme' },
  });
  t.match(doc.subscriber, /^urn:uuid:/);
  t.not(doc.subscriber, ownDoc.subscriber, 'one subscriber id per connection');
  t.equal(
    doc.id,
    `${HUB}/subscriptions/exact/https%3A%2F%2Fexample.com%2Fbooks%2F1/${encodeURIComponent(doc.subscriber)}`,
  );

  const api = await fetch(`${server.url}${HUB}/subscriptions`, { headers: bearer(watcherToken) });
  t.equal(api.status, 200);
  t.equal(((await api.json()) as { subscriptions: unknown[] }).subscriptions.length, 2);
  t.match(api.headers.get('link'), /rel="mercure"; last-event-id="urn:uuid:/);

  client.close();
  const [, , ended] = await watcher.waitFor(3);
  t.equal(ended.event, 'mercure');
  t.same(JSON.parse(ended.data ?? ''), { ...doc, active: false }, 'the same document, inactive');

  const unauthorized = await openSse(
    t,
    sub(server.url, [['match', '*']]),
    bearer(await mercureToken({ subscribe: ['/x'] })),
  );
  await watcher.waitFor(4);
  const blind = await openSse(
    t,
    sub(server.url, [['match', '*']]),
    bearer(await mercureToken({ subscribe: ['/x'] })),
  );
  await watcher.waitFor(5);
  t.equal(unauthorized.received.length, 0, 'subscription events are private');
  t.equal(blind.received.length, 0);
});

t.test(
  'active subscriptions across replicas: listed everywhere, ended when their instance stops',
  async (t) => {
    const dbUrl = await testDatabase(t);
    const config = mercureConfigEnv({ mercureSubscriptions: true });
    const a = await startTestServer(t, dbUrl, config);
    const b = await startTestServer(t, dbUrl, config);
    const watcherToken = await mercureToken({ subscribe: ['*'] });
    const watcher = await openSse(
      t,
      sub(b.url, [['match_urlpattern', '/.well-known/mercure/subscriptions/*']]),
      bearer(watcherToken),
    );
    await watcher.waitFor(1); // its own subscription
    const client = await openSse(
      t,
      sub(a.url, [['match', '/books/1']]),
      bearer(await mercureToken({ subscribe: ['*'] })),
    );
    t.equal(client.status, 200);
    const [, started] = await watcher.waitFor(2);
    t.match(
      JSON.parse(started.data ?? ''),
      { match: '/books/1', active: true },
      'a subscription on A, seen on B',
    );
    const listed = await fetch(`${b.url}${HUB}/subscriptions/exact/${encodeURIComponent('/books/1')}`, {
      headers: bearer(watcherToken),
    });
    t.equal(((await listed.json()) as { subscriptions: unknown[] }).subscriptions.length, 1, 'listed by B');
    await a.close(); // A stops: its subscriptions end with it
    const [, , ended] = await watcher.waitFor(3);
    t.match(JSON.parse(ended.data ?? ''), { match: '/books/1', active: false });
  },
);
