// Mercure discovery (draft-08 §Discovery): the protected resource metadata document, the Link
// header helper for publishers, and credentialed CORS exposing the hub's headers.
import t from 'tap';
import { mercureLink } from '../src/index.ts';
import { startTestServer, testDatabase } from './helpers.ts';
import { DETAIL_TYPE, MERCURE_RESOURCE, mercureConfigEnv } from './mercure-helpers.ts';

const PRM = '/.well-known/oauth-protected-resource/.well-known/mercure';
const APP = 'https://app.example.com';

t.test('protected resource metadata and CORS', async (t) => {
  const server = await startTestServer(t, await testDatabase(t), {
    ...mercureConfigEnv(),
    jwtSecret: 'native-secret-0123456789-0123456789-abcdef',
    corsOrigins: [APP],
  });
  const res = await fetch(`${server.url}${PRM}`, { headers: { origin: APP } });
  t.equal(res.status, 200, 'public: no token needed with access control on');
  t.match(res.headers.get('content-type'), /^application\/json/);
  t.same(await res.json(), {
    resource: MERCURE_RESOURCE,
    authorization_details_types_supported: [DETAIL_TYPE],
    bearer_methods_supported: ['header'],
    mercure_cookie: '__Secure-mercure_access_token',
  });
  t.equal(res.headers.get('access-control-allow-origin'), APP);
  t.equal(
    res.headers.get('access-control-allow-credentials'),
    'true',
    'credentialed, for listed origins only',
  );
  const exposed = (res.headers.get('access-control-expose-headers') ?? '').toLowerCase();
  for (const h of ['mercure-last-event-id', 'link', 'www-authenticate', 'retry-after']) {
    t.ok(exposed.includes(h), `exposes ${h}`);
  }
  const evil = await fetch(`${server.url}${PRM}`, { headers: { origin: 'https://evil.example' } });
  t.equal(evil.headers.get('access-control-allow-origin'), null, 'an unlisted origin is never reflected');

  const pre = await fetch(`${server.url}/.well-known/mercure`, {
    method: 'OPTIONS',
    headers: {
      origin: APP,
      'access-control-request-method': 'POST',
      'access-control-request-headers': 'authorization, content-type, last-event-id',
    },
  });
  t.equal(pre.status, 204);
  t.equal(pre.headers.get('access-control-allow-origin'), APP);
  const allowed = (pre.headers.get('access-control-allow-headers') ?? '').toLowerCase();
  for (const h of ['authorization', 'content-type', 'last-event-id'])
    t.ok(allowed.includes(h), `allows ${h}`);
});

t.test('active subscriptions are advertised when on', async (t) => {
  const server = await startTestServer(
    t,
    await testDatabase(t),
    mercureConfigEnv({ mercureSubscriptions: true }),
  );
  const doc = (await (await fetch(`${server.url}${PRM}`)).json()) as Record<string, unknown>;
  t.equal(doc.mercure_subscriptions, true);
});

t.test('no MERCURE_RESOURCE: no metadata', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  t.equal((await fetch(`${server.url}${PRM}`)).status, 404);
});

t.test('mercureLink', async (t) => {
  const hub = 'https://hub.example.com/.well-known/mercure';
  t.equal(mercureLink(hub), `<${hub}>; rel="mercure"`);
  t.equal(
    mercureLink(hub, { lastEventId: 'urn:uuid:1', type: 'book', contentType: 'application/ld+json' }),
    `<${hub}>; rel="mercure"; last-event-id="urn:uuid:1"; type="book"; content-type="application/ld+json"`,
  );
  t.equal(mercureLink(hub, { lastEventId: 'a"b\\c' }), `<${hub}>; rel="mercure"; last-event-id="a\\"b\\\\c"`);
  t.throws(() => mercureLink(hub, { lastEventId: 'a\r\nSet-Cookie: x=1' }), /control characters/);
  t.throws(() => mercureLink(hub, { type: 'mercure' }), /reserved/);
  t.throws(() => mercureLink(`${hub}> ; rel="x"`), /hub URL/);
});
