import { sql } from 'kysely';
import t from 'tap';
import { openSse, sqlClient, startTestServer, testDatabase, within } from './helpers.ts';
import { mercureConfigEnv, mercureToken } from './mercure-helpers.ts';

const HUB = '/.well-known/mercure';

function form(pairs: [string, string][]): string {
  const f = new URLSearchParams();
  for (const [k, v] of pairs) f.append(k, v);
  return f.toString();
}

async function post(base: string, token: string | undefined, pairs: [string, string][]) {
  const res = await fetch(`${base}${HUB}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/x-www-form-urlencoded',
      ...(token ? { authorization: `Bearer ${token}` } : {}),
    },
    body: form(pairs),
  });
  return { status: res.status, text: await res.text(), auth: res.headers.get('www-authenticate') };
}

const sub = (base: string, pairs: [string, string][]) => `${base}${HUB}?${form(pairs)}`;
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

t.test('publishing needs a publish grant on every topic (A1, A7)', async (t) => {
  const url = await testDatabase(t);
  const server = await startTestServer(t, url, mercureConfigEnv());
  const none = await post(server.url, undefined, [['topic', 'urn:a']]);
  t.equal(none.status, 401);
  t.match(none.auth, /^Bearer/);
  const one = await mercureToken({ publish: ['urn:a'] });
  const partial = await post(server.url, one, [
    ['topic', 'urn:a'],
    ['topic', 'urn:b'],
  ]);
  t.equal(partial.status, 403, 'a grant on one of two topics');
  t.match(partial.auth, /insufficient_scope/);
  const subOnly = await mercureToken({ subscribe: ['*'] });
  t.equal(
    (await post(server.url, subOnly, [['topic', 'urn:a']])).status,
    403,
    'a subscribe grant does not publish',
  );
  const db = sqlClient(t, url);
  const { rows } = await sql<{ n: string }>`select count(*)::text as n from commitfeed.feed`.execute(db);
  t.equal(rows[0].n, '0', 'nothing was stored');
  const pattern = await mercureToken({ publish: [{ match: 'urn\\:*', matchType: 'urlpattern' }, 'urn:b'] });
  t.equal(
    (
      await post(server.url, pattern, [
        ['topic', 'urn:a'],
        ['topic', 'urn:b'],
      ])
    ).status,
    200,
  );
});

t.test(
  'private updates reach only subscribers granted one of their topics, live and on replay (P5, S8, A7, A8)',
  async (t) => {
    const server = await startTestServer(
      t,
      await testDatabase(t),
      mercureConfigEnv({ mercureAnonymous: true }),
    );
    const base = server.url;
    const pub = await mercureToken({ publish: ['*'] });
    const anon = await openSse(t, sub(base, [['match', '*']]));
    t.equal(anon.status, 200, 'anonymous subscribers are allowed (MERCURE_ANONYMOUS)');
    // A matcher wider than the grant: routing never authorizes.
    const narrow = await openSse(
      t,
      sub(base, [['match', '*']]),
      bearer(await mercureToken({ subscribe: ['urn:b'] })),
    );
    const wide = await openSse(
      t,
      sub(base, [['match', '*']]),
      bearer(await mercureToken({ subscribe: ['*'] })),
    );
    const updates: [string, string][][] = [
      [
        ['topic', 'urn:a'],
        ['data', 'public'],
      ],
      [
        ['topic', 'urn:a'],
        ['data', 'private=false is private'],
        ['private', 'false'],
      ],
      [
        ['topic', 'urn:a'],
        ['topic', 'urn:b'],
        ['data', 'alternate grant'],
        ['private', 'on'],
      ],
      [
        ['topic', 'urn:c'],
        ['data', 'nobody but wide'],
        ['private', ''],
      ],
      [
        ['topic', 'urn:a'],
        ['data', 'end'],
      ],
    ];
    for (const u of updates) t.equal((await post(base, pub, u)).status, 200);
    t.same(
      (await anon.waitFor(2)).map((m) => m.data),
      ['public', 'end'],
      'anonymous: public updates only',
    );
    t.same(
      (await narrow.waitFor(3)).map((m) => m.data),
      ['public', 'alternate grant', 'end'],
    );
    t.same(
      (await wide.waitFor(5)).map((m) => m.data),
      ['public', 'private=false is private', 'alternate grant', 'nobody but wide', 'end'],
    );
    // Replays are checked against the token presented now.
    const replay = await openSse(
      t,
      sub(base, [
        ['match', '*'],
        ['last_event_id', 'earliest'],
      ]),
      bearer(await mercureToken({ subscribe: ['urn:b'] })),
    );
    t.same(
      (await replay.waitFor(3)).map((m) => m.data),
      ['public', 'alternate grant', 'end'],
    );
  },
);

t.test('the stream ends when the token expires (A8)', async (t) => {
  const server = await startTestServer(t, await testDatabase(t), mercureConfigEnv());
  const exp = Math.floor(Date.now() / 1000) + 2;
  const s = await openSse(
    t,
    sub(server.url, [['match', 'urn:a']]),
    bearer(await mercureToken({ subscribe: ['*'], exp })),
  );
  t.equal(s.status, 200);
  await within(s.ended, 8000, 'the stream to end at the token expiry');
  t.pass('the stream ended');
  t.ok(Date.now() >= (exp - 1) * 1000, 'not before the expiry');
  const none = await fetch(sub(server.url, [['match', 'urn:a']]), {
    headers: { accept: 'text/event-stream' },
  });
  t.equal(none.status, 401, 'no token: 401 when anonymous subscribers are off');
  await none.body?.cancel();
});
