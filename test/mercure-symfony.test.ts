// A Symfony application publishing with Symfony's Mercure component (Debian's php-symfony-mercure, run
// by php-cli: test/fixtures/mercure-symfony-publish.php) and its default token provider: a 0.x token
// (`typ: JWT`, a float `exp`, the `mercure` claim) signed with MERCURE_PUBLISHER_JWT_KEY. In
// compatibility mode its public and private updates are stored and delivered and Hub::publish returns
// the hub's ids; without the setting the same token is refused (401) and nothing is stored.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { sql } from 'kysely';
import t from 'tap';
import { openSse, sqlClient, startTestServer, testDatabase } from './helpers.ts';
import { LEGACY_SECRET, legacyConfigEnv, mercureConfigEnv, mercureToken } from './mercure-helpers.ts';

const SCRIPT = 'test/fixtures/mercure-symfony-publish.php';
const COMPONENT = '/usr/share/php/Symfony/Component/Mercure/autoload.php';
const missing = !existsSync('/usr/bin/php') || !existsSync(COMPONENT);
const SKIP = missing
  ? 'php-cli and php-symfony-mercure are not installed (apt-get install -y php-cli php-symfony-mercure; .ci/run installs them)'
  : false;

/** Runs the Symfony publisher against `hub`; its JSON lines and exit code. */
function symfonyPublish(hub: string): Promise<{ code: number; lines: Record<string, unknown>[] }> {
  return new Promise((resolve) => {
    execFile('php', [SCRIPT, hub, LEGACY_SECRET], { timeout: 30_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
      const lines = stdout
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      if (code !== 0 && code !== 2) console.error(stderr);
      resolve({ code, lines });
    });
  });
}

t.test('Symfony publishes public and private updates in compatibility mode', { skip: SKIP }, async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, legacyConfigEnv());
  // A 1.0 subscriber beside the 0.x publisher: private updates reach it through the alternate topic.
  const reader = await mercureToken({
    subscribe: [{ match: 'https://example.com/users/42/*', match_type: 'urlpattern' }],
  });
  const s = await openSse(
    t,
    `${server.url}/.well-known/mercure?match=https://example.com/books/1&match=https://example.com/books/2`,
    { authorization: `Bearer ${reader}` },
  );
  t.equal(s.status, 200);
  const { code, lines } = await symfonyPublish(`${server.url}/.well-known/mercure`);
  t.equal(code, 0, JSON.stringify(lines));
  const [minted, pub, priv] = lines;
  t.comment(`token from ${minted.factory}`);
  const [header, claims] = String(minted.token)
    .split('.')
    .slice(0, 2)
    .map((p) => JSON.parse(Buffer.from(p, 'base64url').toString()));
  t.same(header, { typ: 'JWT', alg: 'HS256' }, 'the 0.x token shape');
  t.same(claims.mercure, { publish: ['*'], subscribe: [] });
  t.notOk(Number.isInteger(claims.exp), 'exp with microseconds');

  const got = await s.waitFor(2);
  t.same(
    got.map((m) => [m.id, m.event, m.data]),
    [
      [pub.public, undefined, '{"title":"Dune"}'],
      [priv.private, 'book', '{"title":"Private"}'],
    ],
    'Hub::publish returned the ids the hub delivered',
  );
  t.match(String(pub.public), /^urn:uuid:/);
  t.equal(got[1].retry, 5000);
  const db = sqlClient(t, dbUrl);
  // The stored form leaves `private` out when false (src/mercure/frames.ts, StoredForm).
  const { rows } = await sql<{ data: { private?: boolean; topics: string[] } }>`
    select data from commitfeed.feed where stream = 'mercure/updates' order by txid, id`.execute(db);
  t.same(
    rows.map((r) => [r.data.private === true, r.data.topics.length]),
    [
      [false, 1],
      [true, 2],
    ],
  );
});

t.test('without compatibility mode the same token is refused', { skip: SKIP }, async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(
    t,
    dbUrl,
    mercureConfigEnv({ mercureIssuers: [{ iss: 'https://app.example.com', secret: LEGACY_SECRET }] }),
  );
  const { code, lines } = await symfonyPublish(`${server.url}/.well-known/mercure`);
  t.equal(code, 2, 'Hub::publish threw');
  t.match(lines.at(-1), {
    refused: 'Failed to send an update.',
    status: 401,
    cause: /the access token is not accepted by this hub/,
  });
  const db = sqlClient(t, dbUrl);
  const { rows } = await sql<{ n: string }>`
    select count(*) as n from commitfeed.feed where stream = 'mercure/updates'`.execute(db);
  t.equal(rows[0].n, '0', 'nothing stored');
});
