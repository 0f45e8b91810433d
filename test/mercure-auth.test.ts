// Mercure hub tokens (draft-08 §Authorization, design §5.7/§5.8): how the token is presented, every
// validation failure answered alike (401 invalid_token + resource_metadata), authorization_details
// parsed strictly (one bad entry rejects the token), grants checked per topic, CSRF on cookie
// publishes. A tiny Fastify app runs the authorizer alone; the hub routes have their own tests.
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import { SignJWT, exportJWK, generateKeyPair } from 'jose';
import t, { type Test } from 'tap';
import { mintToken } from '../src/auth/tokens.ts';
import { type Config, loadConfig } from '../src/config/config.ts';
import { mintMercureToken } from '../src/mercure/issuers.ts';
import { startTestServer, testDatabase } from './helpers.ts';
import { type MercureAuthorizer as Authorizer, MercureAuthorizer } from '../src/mercure/authorize.ts';
import { sendMercureError } from '../src/mercure/challenge.ts';
import {
  DETAIL_TYPE,
  MERCURE_ISSUER,
  MERCURE_RESOURCE,
  MERCURE_SECRET,
  mercureConfigEnv,
  mercureToken,
} from './mercure-helpers.ts';

const PRM = 'https://hub.example.com/.well-known/oauth-protected-resource/.well-known/mercure';
const OTHER_ISSUER = 'https://other.example.com';
const OTHER_SECRET = 'other-issuer-secret-0123456789-0123456789';

/** A Fastify app whose two routes answer with the grants, or the authorizer's error. */
async function app(
  t: Test,
  overrides: Partial<Config> = {},
): Promise<{ app: FastifyInstance; authz: Authorizer }> {
  const config: Config = { ...loadConfig({}), ...mercureConfigEnv(), ...overrides };
  const a = Fastify();
  const authz = new MercureAuthorizer(config, a.log);
  for (const action of ['publish', 'subscribe'] as const) {
    a.post(`/${action}`, async (request, reply) => {
      const auth = await authz.authenticate(request, action);
      if (!auth.ok) return sendMercureError(reply, auth);
      return { grants: auth.grants };
    });
  }
  t.teardown(() => a.close());
  return { app: a, authz };
}

type Answer = { status: number; challenge: string | undefined; body: Record<string, unknown> };

async function ask(
  a: FastifyInstance,
  action: 'publish' | 'subscribe',
  headers: Record<string, string>,
): Promise<Answer> {
  const res = await a.inject({ method: 'POST', url: `/${action}`, headers });
  return {
    status: res.statusCode,
    challenge: res.headers['www-authenticate'] as string | undefined,
    body: res.json(),
  };
}

const bearer = (tok: string) => ({ authorization: `Bearer ${tok}` });

function isInvalidToken(t: Test, r: Answer, what: string): void {
  t.equal(r.status, 401, `${what}: 401`);
  t.equal(r.challenge, `Bearer resource_metadata="${PRM}", error="invalid_token"`, `${what}: invalid_token`);
}

t.test('presenting the token: header, cookie, malformed, missing', async (t) => {
  const { app: a } = await app(t);
  const good = await mercureToken({ subscribe: ['*'], publish: ['https://example.com/books/1'] });
  const ok = await ask(a, 'subscribe', bearer(good));
  t.equal(ok.status, 200);
  t.same((ok.body.grants as { iss: string }).iss, MERCURE_ISSUER);

  t.equal(
    (await ask(a, 'subscribe', { authorization: `bEaReR ${good}` })).status,
    200,
    'scheme case-insensitive',
  );
  const cookie = `__Secure-mercure_access_token=${good}`;
  t.equal((await ask(a, 'subscribe', { cookie })).status, 200, 'the cookie when no header');
  t.equal(
    (await ask(a, 'subscribe', { ...bearer(good), cookie: '__Secure-mercure_access_token=garbage' })).status,
    200,
    'a header wins: the cookie is ignored',
  );
  isInvalidToken(
    t,
    await ask(a, 'subscribe', { ...bearer('garbage'), cookie }),
    'a bad header with a good cookie',
  );

  for (const h of ['Basic dXNlcjpwdw==', 'Bearer', 'Bearer ', `Bearer ${good} extra`, `Bearer\t${good}`]) {
    const r = await ask(a, 'subscribe', { authorization: h });
    t.equal(r.status, 400, `malformed ${JSON.stringify(h.slice(0, 20))}: 400`);
    t.equal(r.challenge, `Bearer resource_metadata="${PRM}", error="invalid_request"`);
  }

  const none = await ask(a, 'subscribe', {});
  t.equal(none.status, 401, 'no token, anonymous off: 401');
  t.equal(none.challenge, `Bearer resource_metadata="${PRM}"`, 'a bare challenge: no error code');
  t.equal(none.body.code, 'token_required');
  t.notOk('error' in none.body, 'the OAuth code is not repeated in the body');
  t.equal((await ask(a, 'publish', {})).status, 401);
  t.equal(
    (await ask(a, 'subscribe', { cookie: `commitfeed_token=${good}` })).status,
    401,
    'the native cookie is not read',
  );
});

t.test('anonymous subscribers', async (t) => {
  const { app: a } = await app(t, { mercureAnonymous: true });
  const anon = await ask(a, 'subscribe', {});
  t.equal(anon.status, 200);
  t.equal(anon.body.grants, null, 'anonymous: no grants');
  const pub = await ask(a, 'publish', {});
  t.equal(pub.status, 401, 'publishing still needs a token');
  t.equal(pub.challenge, `Bearer resource_metadata="${PRM}"`);
  isInvalidToken(
    t,
    await ask(a, 'subscribe', { cookie: '__Secure-mercure_access_token=not.a.token' }),
    'an invalid cookie is refused, not downgraded to anonymous',
  );
});

t.test('token validation: every failure is the same invalid_token', async (t) => {
  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const rsaPem = rsa.publicKey.export({ type: 'spki', format: 'pem' }).toString();
  const dir = mkdtempSync(path.join(tmpdir(), 'mercure-auth-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const es = await generateKeyPair('ES256', { extractable: true });
  const jwk = { ...(await exportJWK(es.publicKey)), kid: 'k1', alg: 'ES256' };
  writeFileSync(path.join(dir, 'jwks.json'), JSON.stringify({ keys: [jwk] }));
  const ed = generateKeyPairSync('ed25519');
  writeFileSync(path.join(dir, 'ed.pem'), ed.publicKey.export({ type: 'spki', format: 'pem' }).toString());

  const { app: a } = await app(t, {
    mercureIssuers: [
      { iss: MERCURE_ISSUER, secret: MERCURE_SECRET },
      { iss: OTHER_ISSUER, secret: OTHER_SECRET },
      { iss: 'https://rsa.example.com', publicKey: rsaPem },
      { iss: 'https://jwks.example.com', jwksFile: path.join(dir, 'jwks.json') },
      { iss: 'https://ed.example.com', publicKeyFile: path.join(dir, 'ed.pem') },
    ],
  });
  const sub = { subscribe: ['*'] };
  const now = Math.floor(Date.now() / 1000);

  for (const typ of ['at+jwt', 'application/at+jwt', 'AT+JWT', 'Application/AT+JWT']) {
    t.equal(
      (await ask(a, 'subscribe', bearer(await mercureToken({ ...sub, typ })))).status,
      200,
      `typ ${typ}`,
    );
  }
  t.equal(
    (await ask(a, 'subscribe', bearer(await mercureToken({ ...sub, aud: ['x', MERCURE_RESOURCE] })))).status,
    200,
    'aud as an array containing the resource',
  );
  t.equal(
    (
      await ask(
        a,
        'subscribe',
        bearer(await mercureToken({ ...sub, iss: OTHER_ISSUER, secret: OTHER_SECRET })),
      )
    ).status,
    200,
    'a second issuer with its own key',
  );
  const esTok = await new SignJWT({ aud: MERCURE_RESOURCE, authorization_details: [] })
    .setProtectedHeader({ alg: 'ES256', typ: 'at+jwt', kid: 'k1' })
    .setIssuer('https://jwks.example.com')
    .setExpirationTime('1h')
    .sign(es.privateKey);
  t.equal((await ask(a, 'subscribe', bearer(esTok))).status, 200, 'ES256 from a JWKS file');
  const edTok = await new SignJWT({ aud: MERCURE_RESOURCE })
    .setProtectedHeader({ alg: 'EdDSA', typ: 'at+jwt' })
    .setIssuer('https://ed.example.com')
    .setExpirationTime('1h')
    .sign(ed.privateKey);
  t.equal((await ask(a, 'subscribe', bearer(edTok))).status, 200, 'EdDSA from a PEM file');

  const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const claims = { iss: MERCURE_ISSUER, aud: MERCURE_RESOURCE, exp: now + 3600 };
  const attacker = await generateKeyPair('ES256', { extractable: true });
  const cases: [string, string][] = [
    ['typ JWT (a native-style token)', await mercureToken({ ...sub, typ: 'JWT' })],
    ['no typ', await mercureToken({ ...sub, typ: null })],
    ['an ID token typ', await mercureToken({ ...sub, typ: 'id_token+jwt' })],
    ['no exp', await mercureToken({ ...sub, exp: null })],
    ['expired', await mercureToken({ ...sub, exp: now - 60 })],
    ['nbf in the future', await mercureToken({ ...sub, nbf: now + 600 })],
    [
      'another audience',
      await mercureToken({ ...sub, aud: 'https://other-hub.example.com/.well-known/mercure' }),
    ],
    ['no aud', await mercureToken({ ...sub, claims: { aud: undefined } })],
    ['an unknown issuer', await mercureToken({ ...sub, iss: 'https://evil.example.com' })],
    ['no iss', await mercureToken({ ...sub, claims: { iss: undefined } })],
    ['an issuer claimed with another issuer’s key', await mercureToken({ ...sub, iss: OTHER_ISSUER })],
    ['a bad signature', `${(await mercureToken(sub)).slice(0, -4)}AAAA`],
    ['alg none', `${b64({ alg: 'none', typ: 'at+jwt' })}.${b64(claims)}.`],
    [
      'HS256 signed with the RSA public key as secret',
      await new SignJWT(claims)
        .setProtectedHeader({ alg: 'HS256', typ: 'at+jwt' })
        .setIssuer('https://rsa.example.com')
        .sign(new TextEncoder().encode(rsaPem)),
    ],
    [
      'an embedded jwk',
      await new SignJWT(claims)
        .setProtectedHeader({
          alg: 'ES256',
          typ: 'at+jwt',
          kid: 'k1',
          jwk: await exportJWK(attacker.publicKey),
        })
        .setIssuer('https://jwks.example.com')
        .sign(attacker.privateKey),
    ],
    ['an unknown match_type', await mercureToken({ subscribe: [{ match: '/a', match_type: 'regex' }] })],
    [
      'a match_type in the wrong case',
      await mercureToken({ subscribe: [{ match: '/a', match_type: 'URLPattern' }] }),
    ],
    [
      'an invalid URL pattern',
      await mercureToken({ subscribe: [{ match: '/a/(?=b)', match_type: 'urlpattern' }] }),
    ],
    ['a pattern over the length limit', await mercureToken({ subscribe: [`/${'a'.repeat(1100)}`] })],
    [
      'a non-string action',
      await mercureToken({ details: [{ type: DETAIL_TYPE, actions: [1], topics: [{ match: '*' }] }] }),
    ],
    [
      'empty actions',
      await mercureToken({ details: [{ type: DETAIL_TYPE, actions: [], topics: [{ match: '*' }] }] }),
    ],
    [
      'a bare topic string',
      await mercureToken({ details: [{ type: DETAIL_TYPE, actions: ['subscribe'], topics: ['*'] }] }),
    ],
    [
      'empty topics',
      await mercureToken({ details: [{ type: DETAIL_TYPE, actions: ['subscribe'], topics: [] }] }),
    ],
    [
      'a match that is not a string',
      await mercureToken({
        details: [{ type: DETAIL_TYPE, actions: ['subscribe'], topics: [{ match: 1 }] }],
      }),
    ],
    [
      'a payload that is not an object',
      await mercureToken({
        details: [{ type: DETAIL_TYPE, actions: ['subscribe'], topics: [{ match: '*' }], payload: 'x' }],
      }),
    ],
    ['authorization_details not an array', await mercureToken({ details: { type: DETAIL_TYPE } })],
    ['a detail that is not an object', await mercureToken({ details: ['x'] })],
    [
      'one invalid entry among valid ones (no partial grant)',
      await mercureToken({
        details: [
          { type: DETAIL_TYPE, actions: ['subscribe'], topics: [{ match: '*' }] },
          { type: DETAIL_TYPE, actions: ['publish'], topics: [{ match: '/x', match_type: 'bogus' }] },
        ],
      }),
    ],
    [
      'too many details',
      await mercureToken({
        details: Array.from({ length: 33 }, () => ({
          type: DETAIL_TYPE,
          actions: ['subscribe'],
          topics: [{ match: '*' }],
        })),
      }),
    ],
    [
      'too many topics in a detail',
      await mercureToken({ subscribe: Array.from({ length: 101 }, (_, i) => `/t/${i}`) }),
    ],
    [
      'a native token signed with the same secret',
      await mintToken({
        secret: MERCURE_SECRET,
        scopes: { subscribe: ['*'] },
        ttl: '1h',
        issuer: MERCURE_ISSUER,
        audience: MERCURE_RESOURCE,
      }),
    ],
  ];
  for (const [what, tok] of cases) isInvalidToken(t, await ask(a, 'subscribe', bearer(tok)), what);
  // The same answer by cookie.
  isInvalidToken(
    t,
    await ask(a, 'subscribe', { cookie: `__Secure-mercure_access_token=${cases[0][1]}` }),
    'by cookie',
  );
});

t.test('authorization details: what they grant', async (t) => {
  const { app: a, authz } = await app(t);
  const grantsOf = async (tok: string) => {
    const r = await ask(a, 'subscribe', bearer(tok));
    t.equal(r.status, 200);
    return r.body.grants as Parameters<Authorizer['canPublish']>[0];
  };
  const g = await grantsOf(
    await mercureToken({
      details: [
        { type: 'https://other-api.example/detail', actions: 42 }, // another type: ignored, not judged
        {
          type: DETAIL_TYPE,
          actions: ['publish', 'future-action'],
          topics: [{ match: 'https://example.com/books/:id', match_type: 'urlpattern' }],
        },
        { type: DETAIL_TYPE, actions: ['future-action'], topics: [{ match: '*' }] }, // grants nothing
        {
          type: DETAIL_TYPE,
          actions: ['subscribe'],
          topics: [{ match: 'https://example.com/users/42/*', match_type: 'urlpattern' }],
          payload: { user: 42 },
        },
        {
          type: DETAIL_TYPE,
          actions: ['subscribe'],
          topics: [{ match: '/books/1' }],
          payload: { exact: true },
        },
        { type: DETAIL_TYPE, actions: ['subscribe'], topics: [{ match: '*' }], payload: { fallback: true } },
      ],
    }),
  );
  t.equal(g.publish.length, 1, 'an unknown action grants nothing and is no error');
  t.equal(g.subscribe.length, 3);
  t.ok(
    authz.canPublish(g, ['https://example.com/books/1', 'https://example.com/books/2']),
    'every topic granted',
  );
  t.notOk(
    authz.canPublish(g, ['https://example.com/books/1', 'https://example.com/authors/1']),
    'one topic not granted: no publish',
  );
  t.notOk(authz.canPublish(g, ['https://example.com/books/1/x']));
  t.ok(authz.canRead(g, ['https://example.com/anything']), '* reads everything');
  t.same(
    authz.payloadFor(g, 'https://example.com/users/42/books'),
    { user: 42 },
    'first matching entry gives the payload',
  );
  t.same(authz.payloadFor(g, '/books/1'), { exact: true }, 'exact matcher string');
  t.same(authz.payloadFor(g, 'https://example.com/other'), { fallback: true }, '* as the default');

  const narrow = await grantsOf(
    await mercureToken({
      subscribe: [{ match: 'https://example.com/users/42/*', match_type: 'urlpattern' }],
    }),
  );
  t.notOk(authz.canRead(narrow, ['https://example.com/books/1']), 'a private update outside the grant');
  t.ok(
    authz.canRead(narrow, ['https://example.com/books/1', 'https://example.com/users/42/books/1']),
    'an alternate topic alone is enough',
  );
  t.notOk(authz.canRead(null, ['https://example.com/books/1']), 'anonymous never reads private updates');
  t.notOk(authz.canPublish(narrow, ['https://example.com/users/42/x']), 'subscribe grants do not publish');
  const relative = await grantsOf(
    await mercureToken({ publish: [{ match: '/books/:id', match_type: 'urlpattern' }] }),
  );
  t.ok(
    authz.canPublish(relative, ['https://hub.example.com/books/7']),
    'a relative pattern resolves against the hub URL',
  );
  t.notOk(authz.canPublish(relative, ['https://example.com/books/7']));
  const exact = await grantsOf(await mercureToken({ publish: ['/books/1'] }));
  t.ok(authz.canPublish(exact, ['/books/1']));
  t.notOk(
    authz.canPublish(exact, ['https://hub.example.com/books/1']),
    'exact is byte for byte, never resolved',
  );
  const none = await grantsOf(await mercureToken({ claims: { authorization_details: undefined } }));
  t.same([none.publish, none.subscribe], [[], []], 'no details: nothing granted (still a valid token)');
});

t.test('grants are cached per token', async (t) => {
  const { app: a } = await app(t);
  const tok = await mercureToken({ subscribe: ['*'] });
  const first = await ask(a, 'subscribe', bearer(tok));
  const second = await ask(a, 'subscribe', { cookie: `__Secure-mercure_access_token=${tok}` });
  t.same(first.body, second.body);
  t.equal((first.body.grants as { exp: number }).exp > Date.now() / 1000, true, 'exp is in seconds');
});

t.test('keys bound to a role', async (t) => {
  const { app: a, authz } = await app(t, {
    mercureIssuers: [
      { iss: MERCURE_ISSUER, secret: MERCURE_SECRET, role: 'subscribe' },
      { iss: MERCURE_ISSUER, secret: OTHER_SECRET, role: 'publish' },
    ],
  });
  const both = { publish: ['*'], subscribe: ['*'] };
  const bySub = (await ask(a, 'publish', bearer(await mercureToken(both)))).body.grants as Parameters<
    Authorizer['canPublish']
  >[0];
  t.notOk(authz.canPublish(bySub, ['/x']), 'the subscriber key cannot grant publish');
  t.ok(authz.canRead(bySub, ['/x']));
  const byPub = (await ask(a, 'publish', bearer(await mercureToken({ ...both, secret: OTHER_SECRET })))).body
    .grants as Parameters<Authorizer['canPublish']>[0];
  t.ok(authz.canPublish(byPub, ['/x']));
  t.notOk(authz.canRead(byPub, ['/x']), 'the publisher key cannot grant subscribe');
});

t.test('CSRF: cookie publishes come from allowed origins', async (t) => {
  const { app: a } = await app(t, { mercurePublishOrigins: ['https://app.example.com'] });
  const tok = await mercureToken({ publish: ['*'] });
  const cookie = `__Secure-mercure_access_token=${tok}`;
  t.equal((await ask(a, 'publish', { cookie, origin: 'https://app.example.com' })).status, 200);
  t.equal(
    (await ask(a, 'publish', { cookie, referer: 'https://app.example.com/page?x=1' })).status,
    200,
    'Referer when no Origin',
  );
  const evil = await ask(a, 'publish', { cookie, origin: 'https://evil.example' });
  t.equal(evil.status, 403);
  t.equal(evil.body.code, 'cross_site_publish');
  t.equal(
    (await ask(a, 'publish', { cookie, origin: 'https://evil.example', referer: 'https://app.example.com/' }))
      .status,
    403,
    'Origin wins over Referer',
  );
  t.equal((await ask(a, 'publish', { cookie })).status, 403, 'neither header: refused');
  t.equal((await ask(a, 'publish', { cookie, referer: 'not a url' })).status, 403);
  t.equal((await ask(a, 'publish', bearer(tok))).status, 200, 'the Authorization header needs no origin');
  t.equal((await ask(a, 'subscribe', { cookie })).status, 200, 'subscribing by cookie is not a write');

  const { app: closed } = await app(t);
  t.equal(
    (await ask(closed, 'publish', { cookie, origin: 'https://app.example.com' })).status,
    403,
    'no origins configured: cookie publishes refused',
  );
});

t.test('start-up refuses unsafe or incomplete settings', async (t) => {
  const log = Fastify().log;
  const base = loadConfig({});
  t.throws(
    () => new MercureAuthorizer({ ...base, ...mercureConfigEnv(), mercureResource: undefined }, log),
    /MERCURE_RESOURCE/,
  );
  t.throws(
    () =>
      new MercureAuthorizer(
        { ...base, ...mercureConfigEnv({ mercureIssuers: [{ iss: 'x', secret: 'short' }] }) },
        log,
      ),
    /MERCURE_ISSUERS\[0\]\.secret must be at least 32 bytes/,
  );
  t.throws(
    () => new MercureAuthorizer({ ...base, ...mercureConfigEnv(), mercureAlgorithms: ['ES256'] }, log),
    /MERCURE_ALGORITHMS does not allow/,
  );
  t.throws(() => loadConfig({ MERCURE_ISSUERS: '{}' }), /MERCURE_ISSUERS must be a JSON list/);
  t.throws(() => loadConfig({ MERCURE_ISSUERS: '[{"iss":"a"}]' }), /exactly one of/);
  t.throws(
    () => loadConfig({ MERCURE_ISSUERS: '[{"iss":"a","secret":"s","jwksFile":"f"}]' }),
    /exactly one of/,
  );
  t.throws(() => loadConfig({ MERCURE_ISSUERS: '[{"iss":"a","secret":"s","role":"admin"}]' }), /role/);
  t.throws(() => loadConfig({ MERCURE_RESOURCE: '/.well-known/mercure' }), /MERCURE_RESOURCE/);
  t.throws(() => loadConfig({ MERCURE_ALGORITHMS: 'none' }), /MERCURE_ALGORITHMS/);
  t.throws(() => loadConfig({ MERCURE_PUBLISH_ORIGINS: 'https://a.example/' }), /not an origin/);
  t.same(loadConfig({ MERCURE_ISSUERS: `[{"iss":"a","secret":"${MERCURE_SECRET}"}]` }).mercureIssuers, [
    { iss: 'a', secret: MERCURE_SECRET },
  ]);
  // A hub with access control off and no issuer is the draft's closed-network hub: everything open.
  const { app: open } = await app(t, { mercureIssuers: [], auth: 'off' });
  const r = await ask(open, 'publish', {});
  t.equal(r.status, 200);
  t.equal((r.body.grants as { publish: unknown[] }).publish.length, 1);
});

t.test('hub tokens are not native tokens', async (t) => {
  const server = await startTestServer(t, await testDatabase(t), {
    ...mercureConfigEnv(),
    jwtSecret: MERCURE_SECRET, // even signed with the native key
  });
  const hubToken = await mercureToken({
    subscribe: ['*'],
    publish: ['*'],
    claims: { commitfeed: { subscribe: ['*'], publish: ['*'] } },
  });
  for (const typ of ['at+jwt', 'application/AT+JWT']) {
    const tok = await mercureToken({ typ, claims: { commitfeed: { publish: ['*'] } } });
    const res = await fetch(`${server.url}/v1/streams/orders/events`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tok}`, 'content-type': 'application/json' },
      body: '{"data":1}',
    });
    t.equal(res.status, 401, `typ ${typ} refused on a native route`);
  }
  const res = await fetch(`${server.url}/v1/streams/orders/events?from=earliest`, {
    headers: { authorization: `Bearer ${hubToken}`, accept: 'application/json' },
  });
  t.equal(res.status, 401);
  const native = await mintToken({ secret: MERCURE_SECRET, scopes: { publish: ['*'] }, ttl: '1h' });
  const ok = await fetch(`${server.url}/v1/streams/orders/events`, {
    method: 'POST',
    headers: { authorization: `Bearer ${native}`, 'content-type': 'application/json' },
    body: '{"data":1}',
  });
  t.equal(ok.status, 201, 'native tokens still work on native routes');
});

t.test('tokens minted for the token CLI are accepted with their grants', async (t) => {
  const { app: a, authz } = await app(t);
  const tok = await mintMercureToken({
    secret: MERCURE_SECRET,
    iss: MERCURE_ISSUER,
    aud: MERCURE_RESOURCE,
    ttl: '1h',
    publish: [{ match: 'https://example.com/books/1', matchType: 'exact' }],
    subscribe: [{ match: 'https://example.com/books/:id', matchType: 'urlpattern' }],
    payload: { tenant: 'acme' },
  });
  const r = await ask(a, 'publish', bearer(tok));
  t.equal(r.status, 200);
  const g = r.body.grants as Parameters<Authorizer['canPublish']>[0];
  t.ok(authz.canPublish(g, ['https://example.com/books/1']));
  t.notOk(authz.canPublish(g, ['https://example.com/books/2']));
  t.ok(authz.canRead(g, ['https://example.com/books/2']));
  t.same(authz.payloadFor(g, 'https://example.com/books/:id'), { tenant: 'acme' });
});
