// Access control: tokens from three sources, per-stream scopes, replay re-checked, SSE expiry and
// per-token limits, admin routes, key types with pinned algorithms, and the start-up mode rules.
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { SignJWT, exportJWK } from 'jose';
import t from 'tap';
import { resolveAuthMode } from '../src/auth/mode.ts';
import { CLOCK_TOLERANCE_S, matcher, mintToken } from '../src/auth/tokens.ts';
import { parseSse, textChunks } from '../src/client/sse.ts';
import { loadConfig } from '../src/config/config.ts';
import { startServer } from '../src/server.ts';
import { feedRows, openSse, sleep, sqlClient, startTestServer, testDatabase } from './helpers.ts';

const SECRET = 'test-secret-0123456789-0123456789-abcdef';
const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');

type Scopes = Parameters<typeof mintToken>[0]['scopes'];
const token = (scopes: Scopes, ttl: string | number = '1h', subject = 'tester') =>
  mintToken({ secret: SECRET, scopes, ttl, subject });

async function call(
  url: string,
  init: { method?: string; token?: string; headers?: Record<string, string>; body?: unknown } = {},
) {
  const headers: Record<string, string> = { ...(init.headers ?? {}) };
  if (init.token) headers.authorization = `Bearer ${init.token}`;
  if (init.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(url, {
    method: init.method ?? (init.body !== undefined ? 'POST' : 'GET'),
    headers,
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
  });
  const text = await res.text();
  let body: Record<string, unknown> = {};
  try {
    body = JSON.parse(text);
  } catch {
    body = { text };
  }
  return { status: res.status, headers: res.headers, body };
}

t.test('glob patterns', async (t) => {
  const m = matcher(['orders.*', 'audit']);
  t.ok(m('orders.eu'));
  t.ok(m('orders.eu.paid'));
  t.notOk(m('orders'), '`orders.*` needs the dot');
  t.ok(m('audit'));
  t.notOk(m('audit2'));
  t.notOk(m('xorders.eu'), 'anchored');
  t.ok(matcher(['*'])('anything'));
  t.ok(matcher(['a*c'])('abbbc'));
  t.notOk(matcher(['a.c'])('abc'), 'a dot is literal');
  t.notOk(matcher([])('x'), 'no patterns: nothing');
});

t.test('start-up mode', async (t) => {
  const base = loadConfig({});
  t.equal(resolveAuthMode({ ...base }).mode, 'off', 'loopback without keys: off');
  t.match(resolveAuthMode({ ...base }).warning, /access control is OFF/);
  t.equal(resolveAuthMode({ ...base, host: '::1' }).mode, 'off');
  t.throws(() => resolveAuthMode({ ...base, host: '0.0.0.0' }), /no JWT key is configured/);
  t.throws(() => resolveAuthMode({ ...base, host: '10.1.2.3' }), /AUTH=off/);
  const open = resolveAuthMode({ ...base, host: '0.0.0.0', auth: 'off' });
  t.equal(open.mode, 'off', 'explicit AUTH=off on a public host');
  t.match(open.warning, /DISABLED/);
  t.equal(resolveAuthMode({ ...base, jwtSecret: SECRET }).mode, 'jwt', 'a key: jwt by default');
  t.equal(resolveAuthMode({ ...base, host: '0.0.0.0', jwtSecret: SECRET }).mode, 'jwt');
  t.throws(() => resolveAuthMode({ ...base, auth: 'jwt' }), /needs a key/);
  t.match(resolveAuthMode({ ...base, auth: 'off', jwtSecret: SECRET }).warning, /ignored/);
  t.throws(() => loadConfig({ AUTH: 'maybe' }), /AUTH must be/);
  await t.rejects(
    startServer({ ...base, host: '0.0.0.0', port: 0, databaseUrl: 'postgres://nowhere.invalid/x' }),
    /no JWT key is configured/,
    'the server refuses to start before touching the database',
  );
});

t.test('jwt mode: deny by default, scopes, sources, replay, SSE expiry and limits', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, {
    jwtSecret: SECRET,
    maxSsePerToken: 2,
    metricsRequireAdmin: true,
  });
  const db = sqlClient(t, dbUrl);
  const u = server.url;
  const writer = await token({ publish: ['orders.*'] });
  const reader = await token({ subscribe: ['orders.*'] });
  const all = await token({ publish: ['*'], subscribe: ['*'] });

  t.test('public routes need no token', async (t) => {
    t.equal((await call(`${u}/healthz`)).status, 200);
    t.equal((await call(`${u}/readyz`)).status, 200);
    t.equal((await call(`${u}/healthz`, { token: 'garbage' })).status, 200, 'a bad token is ignored there');
    t.equal((await call(`${u}/v1/nothing`)).status, 404, 'unknown routes stay 404');
  });

  t.test('no token: 401 before anything is read or written', async (t) => {
    for (const [name, res] of [
      ['publish', await call(`${u}/v1/streams/orders.eu/events`, { body: { data: 1 } })],
      ['JSON read', await call(`${u}/v1/streams/orders.eu/events`)],
      [
        'SSE read',
        await call(`${u}/v1/streams/orders.eu/events`, { headers: { accept: 'text/event-stream' } }),
      ],
      ['multi read', await call(`${u}/v1/events?stream=orders.eu`)],
    ] as const) {
      t.equal(res.status, 401, `${name}: 401`);
      t.equal(res.body.code, 'unauthorized', `${name}: code`);
      t.equal(res.headers.get('www-authenticate'), 'Bearer realm="commitfeed"', `${name}: challenge`);
    }
    t.equal((await feedRows(db)).length, 0);
  });

  t.test('publish scope', async (t) => {
    const ok = await call(`${u}/v1/streams/orders.eu/events`, { token: writer, body: { data: 1 } });
    t.equal(ok.status, 201);
    const batch = await call(`${u}/v1/streams/orders.us/events`, {
      token: writer,
      body: [{ data: 2 }, { data: 3 }],
    });
    t.equal(batch.status, 201);
    const no = await call(`${u}/v1/streams/payments/events`, { token: writer, body: { data: 4 } });
    t.equal(no.status, 403);
    t.equal(no.body.code, 'forbidden');
    t.match(no.body.message, /may not publish to stream "payments"/);
    t.match(no.headers.get('www-authenticate'), /insufficient_scope/);
    const readOnly = await call(`${u}/v1/streams/orders.eu/events`, { token: reader, body: { data: 5 } });
    t.equal(readOnly.status, 403, 'subscribe does not imply publish');
    const bare = await call(`${u}/v1/streams/orders.eu/events`, {
      token: await token({}),
      body: { data: 6 },
    });
    t.equal(bare.status, 403, 'a token without the claim may do nothing');
    t.same(
      (await feedRows(db)).map((r) => r.stream),
      ['orders.eu', 'orders.us', 'orders.us'],
      'only allowed publishes were written',
    );
    t.equal(
      (await call(`${u}/v1/streams/payments/events`, { token: all, body: { data: 'secret' } })).status,
      201,
    );
  });

  t.test('token sources: header, query parameter, cookie', async (t) => {
    const q = await call(`${u}/v1/streams/orders.eu/events?from=earliest&access_token=${reader}`);
    t.equal(q.status, 200, '?access_token is accepted and removed before validation');
    t.equal((q.body.events as unknown[]).length, 1);
    const c = await call(`${u}/v1/streams/orders.eu/events?from=earliest`, {
      headers: { cookie: `other=1; commitfeed_token=${reader}` },
    });
    t.equal(c.status, 200, 'cookie');
    const h = await call(`${u}/v1/streams/orders.eu/events?from=earliest`, { token: reader });
    t.equal(h.status, 200, 'header');
    const first = await call(`${u}/v1/streams/orders.eu/events?access_token=${reader}`, { token: writer });
    t.equal(first.status, 403, 'the header wins over the query parameter');
    const basic = await call(`${u}/v1/streams/orders.eu/events`, {
      headers: { authorization: 'Basic eDp5' },
    });
    t.equal(basic.status, 401);
    t.match(basic.headers.get('www-authenticate'), /invalid_token/);
    const twice = await call(`${u}/v1/streams/orders.eu/events?access_token=a&access_token=b`);
    t.equal(twice.status, 401, 'two query tokens are refused');
  });

  t.test('replay is authorized like live delivery', async (t) => {
    const multi = await call(`${u}/v1/events?stream=orders.eu&stream=payments&from=earliest`, {
      token: reader,
    });
    t.equal(multi.status, 403, 'each stream of /v1/events is checked');
    t.match(multi.body.message, /"payments"/);
    const sse = await call(`${u}/v1/streams/payments/events?after=0-0`, {
      token: reader,
      headers: { accept: 'text/event-stream', 'last-event-id': '0-0' },
    });
    t.equal(sse.status, 403, 'a cursor does not bypass the check (SSE: before the stream starts)');
    const es = await openSse(
      t,
      `${u}/v1/events?stream=orders.eu&stream=orders.us&from=earliest&access_token=${reader}`,
    );
    t.equal(es.status, 200);
    const got = await es.waitFor(3);
    t.same(
      got.map((m) => m.data),
      ['1', '2', '3'],
      'replay from earliest holds only allowed streams, never "secret"',
    );
    es.close();
  });

  t.test('invalid tokens are 401', async (t) => {
    const [h, p] = reader.split('.');
    const forged = `${h}.${b64({ commitfeed: { subscribe: ['*'] }, exp: 9999999999 })}.${reader.split('.')[2]}`;
    const none = `${b64({ alg: 'none', typ: 'JWT' })}.${b64({ commitfeed: { subscribe: ['*'] } })}.`;
    const wrongKey = await mintToken({ secret: 'x'.repeat(40), scopes: { subscribe: ['*'] }, ttl: '1h' });
    const expired = await token({ subscribe: ['*'] }, -120);
    const hs512 = await new SignJWT({ commitfeed: { subscribe: ['*'] } })
      .setProtectedHeader({ alg: 'HS512' })
      .sign(new TextEncoder().encode(SECRET));
    const badClaim = await token({ subscribe: 'orders' as unknown as string[] });
    const cases: [string, string, RegExp][] = [
      ['forged payload', forged, /signature/],
      ['alg none', none, /algorithm "none" is not accepted/],
      ['wrong secret', wrongKey, /signature/],
      ['expired', expired, /expired/],
      ['unpinned algorithm', hs512, /HS512/],
      ['malformed claim', badClaim, /subscribe/],
      ['not a JWT', 'hello', /not a signed JWT/],
      ['truncated', `${h}.${p}`, /not a signed JWT|invalid/],
    ];
    for (const [name, tok, why] of cases) {
      const res = await call(`${u}/v1/streams/orders.eu/events`, { token: tok });
      t.equal(res.status, 401, `${name}: 401`);
      t.equal(res.body.code, 'unauthorized', `${name}: code`);
      t.match(res.body.message, why, `${name}: says why`);
      t.match(res.headers.get('www-authenticate'), /error="invalid_token"/, `${name}: challenge`);
    }
  });

  t.test('an expiring token ends an open stream with auth-expired', async (t) => {
    const short = await token({ subscribe: ['orders.*'] }, 2);
    const exp = JSON.parse(Buffer.from(short.split('.')[1], 'base64url').toString()).exp as number;
    const res = await fetch(`${u}/v1/streams/orders.eu/events?from=earliest`, {
      headers: { accept: 'text/event-stream', authorization: `Bearer ${short}` },
    });
    t.equal(res.status, 200);
    const msgs = [];
    const started = Date.now();
    for await (const m of parseSse(textChunks(res.body!))) msgs.push(m);
    const last = msgs[msgs.length - 1];
    t.equal(last.event, 'auth-expired', 'the last frame is auth-expired');
    t.match(JSON.parse(last.data!), { code: 'auth_expired' });
    // Expiry is `exp` plus the clock tolerance verification allows (one rule for every path).
    const due = (exp + CLOCK_TOLERANCE_S) * 1000;
    t.ok(Date.now() >= due && Date.now() < due + 1500, `ended at expiry (${Date.now() - due} ms after it)`);
    t.ok(Date.now() - started < 9000, 'ended within ttl + tolerance');
    t.ok(
      msgs.some((m) => m.data === '1'),
      'events were delivered before expiry',
    );
  });

  t.test('SSE connections per token', async (t) => {
    const mine = await token({ subscribe: ['*'] });
    const a = await openSse(t, `${u}/v1/streams/orders.eu/events`, { authorization: `Bearer ${mine}` });
    const b = await openSse(t, `${u}/v1/streams/orders.us/events`, { authorization: `Bearer ${mine}` });
    t.equal(a.status, 200);
    t.equal(b.status, 200);
    const c = await call(`${u}/v1/streams/orders.eu/events`, {
      token: mine,
      headers: { accept: 'text/event-stream' },
    });
    t.equal(c.status, 429);
    t.equal(c.body.code, 'too_many_connections');
    t.ok(c.headers.get('retry-after'));
    const other = await openSse(t, `${u}/v1/streams/orders.eu/events`, { authorization: `Bearer ${all}` });
    t.equal(other.status, 200, 'another token has its own budget');
    a.close();
    await sleep(200);
    const d = await openSse(t, `${u}/v1/streams/orders.eu/events`, { authorization: `Bearer ${mine}` });
    t.equal(d.status, 200, 'a closed stream frees its slot');
    b.close();
    d.close();
    other.close();
  });

  t.test('admin routes', async (t) => {
    t.equal((await call(`${u}/metrics`)).status, 401);
    t.equal((await call(`${u}/metrics`, { token: all })).status, 403);
    const admin = await token({ admin: true });
    const ok = await call(`${u}/metrics`, { token: admin });
    t.equal(ok.status, 200);
  });
});

t.test('asymmetric keys: PEM (RS256) and JWKS (ES256), algorithms pinned', async (t) => {
  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const pem = rsa.publicKey.export({ type: 'spki', format: 'pem' }).toString();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'cf-jwks-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const jwksFile = path.join(dir, 'jwks.json');
  writeFileSync(
    jwksFile,
    JSON.stringify({ keys: [{ ...(await exportJWK(ec.publicKey)), kid: 'ec1', use: 'sig' }] }),
  );
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { jwtPublicKey: pem, jwksFile });
  const claims = { commitfeed: { subscribe: ['*'] } };
  const rs = await new SignJWT(claims)
    .setProtectedHeader({ alg: 'RS256' })
    .setExpirationTime('5m')
    .sign(rsa.privateKey);
  const es = await new SignJWT(claims)
    .setProtectedHeader({ alg: 'ES256', kid: 'ec1' })
    .setExpirationTime('5m')
    .sign(ec.privateKey);
  // The classic confusion: HS256 with the public key's PEM text as the HMAC secret.
  const confused = await new SignJWT(claims)
    .setProtectedHeader({ alg: 'HS256' })
    .sign(new TextEncoder().encode(pem));
  const ps = await new SignJWT(claims).setProtectedHeader({ alg: 'PS256' }).sign(rsa.privateKey);
  const otherEc = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const unknownKid = await new SignJWT(claims)
    .setProtectedHeader({ alg: 'ES256', kid: 'ec1' })
    .sign(otherEc.privateKey);
  const read = (tok: string) => call(`${server.url}/v1/streams/s/events`, { token: tok });
  t.equal((await read(rs)).status, 200, 'RS256 with the PEM key');
  t.equal((await read(es)).status, 200, 'ES256 with the JWKS key');
  t.equal((await read(confused)).status, 401, 'HS256 signed with the public key is refused');
  t.equal((await read(ps)).status, 401, 'PS256 is not pinned to the RSA key');
  t.equal((await read(unknownKid)).status, 401, 'a signature from another key fails');
});

t.test('AUTH=off with keys configured lets everything through', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { jwtSecret: SECRET, auth: 'off' });
  const res = await call(`${server.url}/v1/streams/s/events?access_token=whatever`, { body: { data: 1 } });
  t.equal(res.status, 201);
});

t.test('queues: enqueue, work and admin scopes', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { jwtSecret: SECRET });
  const db = sqlClient(t, dbUrl);
  const u = server.url;
  const producer = await token({ enqueue: ['emails'] });
  const worker = await token({ work: ['emails'] });
  const admin = await token({ admin: true });
  const q = `${u}/v1/queues/emails`;

  t.equal((await call(`${q}/jobs`, { body: { payload: 1 } })).status, 401, 'no token');
  t.equal(
    (await call(`${q}/jobs`, { token: worker, body: { payload: 1 } })).status,
    403,
    'work is not enqueue',
  );
  t.equal((await call(`${u}/v1/queues/sms/jobs`, { token: producer, body: { payload: 1 } })).status, 403);
  t.equal((await call(`${q}/jobs`, { token: producer, body: { payload: 1 } })).status, 201);
  t.equal((await call(`${q}/claim`, { token: producer, body: {} })).status, 403, 'enqueue is not work');
  const claimed = await call(`${q}/claim`, { token: worker, body: { max: 1 } });
  t.equal(claimed.status, 200);
  const job = (claimed.body.jobs as { id: string; lease: string }[])[0];
  t.ok(job, 'the worker claimed the job');
  const ack = `${q}/jobs/${job.id}/ack`;
  t.equal((await call(ack, { token: producer, body: { lease: job.lease } })).status, 403);
  t.equal(
    (await call(`${q}/jobs/${job.id}/extend`, { token: producer, body: { lease: job.lease, seconds: 5 } }))
      .status,
    403,
  );
  t.equal(
    (await call(`${q}/ack`, { token: producer, body: [{ id: job.id, lease: job.lease }] })).status,
    403,
  );
  t.equal((await call(ack, { token: worker, body: { lease: job.lease } })).status, 204);

  t.equal((await call(q, { token: producer })).status, 200, 'stats: a producer sees its queue');
  t.equal((await call(`${u}/v1/queues/sms`, { token: producer })).status, 403, 'but not others');
  const list = await call(`${u}/v1/queues`, { token: await token({ work: ['nothing'] }) });
  t.same(list.body.queues, [], 'the list holds only visible queues');
  const all = await call(`${u}/v1/queues`, { token: admin });
  t.same(
    (all.body.queues as { name: string }[]).map((x) => x.name),
    ['emails'],
  );

  for (const [method, path] of [
    ['POST', `${q}/pause`],
    ['POST', `${q}/resume`],
    ['GET', `${q}/dead`],
    ['POST', `${q}/dead/retry`],
    ['POST', `${q}/dead/1/retry`],
  ] as const) {
    t.equal(
      (await call(path, { method, token: worker })).status,
      403,
      `${method} ${path.slice(u.length)}: 403 without admin`,
    );
    t.equal(
      (await call(path, { method })).status,
      401,
      `${method} ${path.slice(u.length)}: 401 without a token`,
    );
  }
  const watch = await openSse(t, `${q}/events?access_token=${producer}`);
  t.equal(watch.status, 200, 'a producer may watch its queue');
  watch.close();
  const noWatch = await call(`${q}/events`, {
    token: await token({ subscribe: ['*'] }),
    headers: { accept: 'text/event-stream' },
  });
  t.equal(noWatch.status, 403, 'subscribe on streams does not open queues');
  t.equal((await call(`${q}/pause`, { method: 'POST', token: admin })).status, 200, 'admin pauses');
  t.equal((await call(`${q}/dead`, { token: admin })).status, 200, 'admin lists dead jobs');
  const { rows } = await (await import('kysely')).sql<{
    n: number;
  }>`select count(*)::int as n from commitfeed.jobs`.execute(db);
  // The acked job stays, completed, for JOB_RETENTION.
  t.equal(rows[0].n, 1, 'only the allowed job was written (and acked)');
});

t.test('transactions: every op is checked before anything is written', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { jwtSecret: SECRET });
  const db = sqlClient(t, dbUrl);
  const writer = await token({ publish: ['orders.*'] });
  const tx = (ops: unknown[], tok?: string) => call(`${server.url}/v1/tx`, { token: tok, body: { ops } });
  const ok = { publish: { stream: 'orders.eu', data: 1 } };
  const other = { publish: { stream: 'payments', data: 2 } };
  t.equal((await tx([ok])).status, 401, 'no token');
  const mixed = await tx([ok, other], writer);
  t.equal(mixed.status, 403, 'one op on a stream the token may not publish to fails the whole transaction');
  t.match(mixed.body.message, /"payments"/);
  t.equal((await feedRows(db)).length, 0, 'nothing was written');
  t.equal((await tx([ok, ok], writer)).status, 200);
  t.equal((await feedRows(db)).length, 2);
});
