// CORS for browsers: listed origins echoed with credentials (never `*` with credentials), preflight
// with Authorization / Last-Event-ID, and the headers reach SSE responses and error answers too.
import t from 'tap';
import { mintToken } from '../src/auth/tokens.ts';
import { openSse, startTestServer, testDatabase } from './helpers.ts';

const SECRET = 'test-secret-0123456789-0123456789-abcdef';
const APP = 'https://app.example.com';

t.test('listed origins, with credentials', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, {
    jwtSecret: SECRET,
    corsOrigins: [APP, 'http://localhost:5173'],
  });
  const u = server.url;
  const tok = await mintToken({ secret: SECRET, scopes: { subscribe: ['*'], publish: ['*'] }, ttl: '1h' });

  const pre = await fetch(`${u}/v1/streams/orders/events`, {
    method: 'OPTIONS',
    headers: {
      origin: APP,
      'access-control-request-method': 'GET',
      'access-control-request-headers': 'authorization, last-event-id',
    },
  });
  t.equal(pre.status, 204, 'preflight answered without a token');
  t.equal(pre.headers.get('access-control-allow-origin'), APP, 'the exact origin is echoed');
  t.equal(pre.headers.get('access-control-allow-credentials'), 'true');
  const allowed = (pre.headers.get('access-control-allow-headers') ?? '').toLowerCase();
  for (const h of ['authorization', 'last-event-id', 'content-type'])
    t.ok(allowed.includes(h), `allows ${h}`);
  t.match(pre.headers.get('vary') ?? '', /origin/i);

  const preEvil = await fetch(`${u}/v1/streams/orders/events`, {
    method: 'OPTIONS',
    headers: { origin: 'https://evil.example', 'access-control-request-method': 'POST' },
  });
  t.equal(preEvil.headers.get('access-control-allow-origin'), null, 'an unlisted origin gets no grant');

  const post = await fetch(`${u}/v1/streams/orders/events`, {
    method: 'POST',
    headers: { origin: APP, authorization: `Bearer ${tok}`, 'content-type': 'application/json' },
    body: '{"data":1}',
  });
  t.equal(post.status, 201);
  t.equal(post.headers.get('access-control-allow-origin'), APP);

  const denied = await fetch(`${u}/v1/streams/orders/events`, { headers: { origin: APP } });
  t.equal(denied.status, 401);
  t.equal(denied.headers.get('access-control-allow-origin'), APP, 'the browser can read the 401');
  t.match(denied.headers.get('access-control-expose-headers') ?? '', /WWW-Authenticate/i);

  // EventSource with credentials: cookie + the origin; the SSE response is written on the raw socket.
  const es = await openSse(t, `${u}/v1/streams/orders/events?from=earliest`, {
    origin: APP,
    cookie: `commitfeed_token=${tok}`,
  });
  t.equal(es.status, 200);
  await es.waitFor(1);
  es.close();
  const res = await fetch(`${u}/v1/streams/orders/events?access_token=${tok}`, {
    headers: { origin: APP, accept: 'text/event-stream' },
  });
  t.equal(res.headers.get('content-type'), 'text/event-stream; charset=utf-8');
  t.equal(res.headers.get('access-control-allow-origin'), APP, 'CORS headers reach the SSE response');
  t.equal(res.headers.get('access-control-allow-credentials'), 'true');
  await res.body?.cancel();
});

t.test('`*`: any origin, never with credentials', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { corsOrigins: ['*'] });
  const res = await fetch(`${server.url}/v1/streams/orders/events`, {
    headers: { origin: 'https://x.example' },
  });
  t.equal(res.status, 200);
  t.equal(res.headers.get('access-control-allow-origin'), '*');
  t.equal(res.headers.get('access-control-allow-credentials'), null);
});

t.test('no CORS_ORIGINS: no CORS headers', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl);
  const res = await fetch(`${server.url}/healthz`, { headers: { origin: APP } });
  t.equal(res.headers.get('access-control-allow-origin'), null);
});

t.test('bad CORS_ORIGINS refuse to start', async (t) => {
  const dbUrl = await testDatabase(t);
  await t.rejects(startTestServer(t, dbUrl, { corsOrigins: ['https://a.example/'] }), /not an origin/);
  await t.rejects(startTestServer(t, dbUrl, { corsOrigins: ['*', APP] }), /cannot be combined/);
});
