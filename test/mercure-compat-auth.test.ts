// Compatibility mode 8, the token side (guide §Compatibility mode): the settings and their start-up
// refusals, 0.x tokens (the `mercure` and `https://mercure.rocks/` claims, no typ/aud/iss/exp) verified
// by the 0.x key of the request's role only, a token naming a MERCURE_ISSUERS issuer keeping every 1.0
// check, the `authorization` query parameter and `mercureAuthorization` cookie, and everything refused
// as before without the setting. A tiny Fastify app runs the authorizer alone (no database).
import { generateKeyPairSync } from 'node:crypto';
import { Writable } from 'node:stream';
import Fastify, { type FastifyInstance } from 'fastify';
import t, { type Test } from 'tap';
import { redactUrl } from '../src/auth/token-source.ts';
import { type Config, loadConfig } from '../src/config/config.ts';
import { MercureAuthorizer } from '../src/mercure/authorize.ts';
import { sendMercureError } from '../src/mercure/challenge.ts';
import {
  LEGACY_SECRET,
  MERCURE_ISSUER,
  MERCURE_SECRET,
  legacyConfigEnv,
  legacyToken,
  mercureConfigEnv,
  mercureToken,
} from './mercure-helpers.ts';

const SUBSCRIBER_SECRET = 'a-0.x-subscriber-secret-0123456789-abcdef';

/** The authorizer behind POST /publish and POST /subscribe, answering the grants (or the error). */
async function hub(t: Test, overrides: Partial<Config>, logs: string[] = []) {
  const config: Config = { ...loadConfig({}), ...overrides };
  const stream = new Writable({
    write(chunk, _enc, done) {
      logs.push(String(chunk));
      done();
    },
  });
  const a = Fastify({ logger: { level: 'warn', stream } });
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

interface Grants {
  publish: { match: string; matchType: string }[];
  subscribe: { selector: { match: string; matchType: string }; payload?: unknown }[];
  exp: number | null;
}

async function ask(
  a: FastifyInstance,
  action: 'publish' | 'subscribe',
  headers: Record<string, string> = {},
  query = '',
): Promise<{ status: number; grants: Grants }> {
  const res = await a.inject({ method: 'POST', url: `/${action}${query}`, headers });
  return { status: res.statusCode, grants: res.json().grants };
}

const bearer = (tok: string) => ({ authorization: `Bearer ${tok}` });
const selectors = (g: Grants) => g.publish.map((s) => `${s.matchType}:${s.match}`);

t.test('the settings: 8 or unset, and the 0.x keys only with it (clear refusals at start)', async (t) => {
  t.equal(loadConfig({}).mercureProtocolCompatibility, undefined);
  t.equal(loadConfig({ MERCURE_PROTOCOL_COMPATIBILITY: '8' }).mercureProtocolCompatibility, 8);
  t.throws(
    () => loadConfig({ MERCURE_PROTOCOL_COMPATIBILITY: '7' }),
    /MERCURE_PROTOCOL_COMPATIBILITY must be 8/,
  );
  t.throws(
    () => loadConfig({ MERCURE_PUBLISHER_JWT_ALG: 'HS512' }),
    /MERCURE_PUBLISHER_JWT_ALG must be one of/,
  );
  const log = Fastify().log;
  const base = { ...loadConfig({}), ...mercureConfigEnv() };
  const build = (o: Partial<Config>) => () => new MercureAuthorizer({ ...base, ...o }, log);
  t.throws(
    build({ mercurePublisherJwtKey: LEGACY_SECRET }),
    /MERCURE_PUBLISHER_JWT_KEY is a Mercure 0.x setting: it needs MERCURE_PROTOCOL_COMPATIBILITY=8/,
  );
  t.throws(
    build({ mercureSubscriberJwtAlg: 'HS256' }),
    /MERCURE_SUBSCRIBER_JWT_ALG is a Mercure 0.x setting/,
  );
  const compat = { mercureProtocolCompatibility: 8 as const };
  t.throws(build({ ...compat, mercurePublisherJwtAlg: 'RS256' }), /MERCURE_PUBLISHER_JWT_ALG is set but/);
  t.throws(build({ ...compat, mercurePublisherJwtKey: '!ChangeMe!' }), /at least 32 bytes/);
  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 }).publicKey.export({
    type: 'spki',
    format: 'pem',
  }) as string;
  t.throws(build({ ...compat, mercurePublisherJwtKey: rsa }), /is a PEM key: set MERCURE_PUBLISHER_JWT_ALG/);
  t.throws(
    build({ ...compat, mercurePublisherJwtKey: rsa, mercurePublisherJwtAlg: 'ES256' }),
    /MERCURE_PUBLISHER_JWT_ALG is ES256 but MERCURE_PUBLISHER_JWT_KEY is a key for RS256/,
  );
  t.throws(
    build({ ...compat, mercurePublisherJwtKey: 'not a key', mercurePublisherJwtAlg: 'RS256' }),
    /MERCURE_PUBLISHER_JWT_KEY must be a PEM public key for RS256/,
  );
  t.throws(
    build({ ...compat, mercurePublisherJwtKey: LEGACY_SECRET, mercureAlgorithms: ['ES256'] }),
    /MERCURE_PUBLISHER_JWT_ALG is HS256, which MERCURE_ALGORITHMS does not allow/,
  );
  // One line of a PEM with literal \n (an env file) is read as the PEM.
  t.doesNotThrow(
    build({
      ...compat,
      mercurePublisherJwtKey: rsa.replaceAll('\n', '\\n'),
      mercurePublisherJwtAlg: 'RS256',
    }),
  );

  const logs: string[] = [];
  await hub(t, legacyConfigEnv(), logs);
  await hub(t, mercureConfigEnv(), logs);
  const warned = logs.filter((l) => l.includes('MERCURE_PROTOCOL_COMPATIBILITY=8'));
  t.equal(warned.length, 1, 'one warning at start, and only in compatibility mode');
  t.match(JSON.parse(warned[0]), { level: 40, msg: /weakens token validation/ });
});

t.test('0.x tokens: the mercure claim without typ, aud, iss or exp, by the key of the role', async (t) => {
  const { app: a, authz } = await hub(t, legacyConfigEnv({ mercureSubscriberJwtKey: SUBSCRIBER_SECRET }));
  // Symfony's LcobucciFactory: typ JWT, a float exp, the mercure claim and nothing else.
  const symfony = await legacyToken({
    exp: Date.now() / 1000 + 3600.123456,
    mercure: { publish: ['*'], subscribe: [] },
  });
  const pub = await ask(a, 'publish', bearer(symfony));
  t.equal(pub.status, 200);
  t.same(selectors(pub.grants), ['topic:*']);
  t.equal(
    (await ask(a, 'subscribe', bearer(symfony))).status,
    401,
    'the publisher key never verifies a subscriber',
  );

  const forever = await legacyToken(
    {
      mercure: {
        subscribe: ['https://example.com/books/{id}', { match: '/a/:x', match_type: 'urlpattern' }],
      },
    },
    { secret: SUBSCRIBER_SECRET },
  );
  const sub = await ask(a, 'subscribe', bearer(forever));
  t.equal(sub.status, 200);
  t.equal(sub.grants.exp, null, 'no exp: never expires (Infinity)');
  t.same(
    sub.grants.subscribe.map((s) => `${s.selector.matchType}:${s.selector.match}`),
    ['topic:https://example.com/books/{id}', 'urlpattern:/a/:x'],
  );
  t.equal(
    (await ask(a, 'publish', bearer(forever))).status,
    401,
    'the subscriber key never verifies a publisher',
  );

  const expired = await legacyToken({ exp: Math.floor(Date.now() / 1000) - 60, mercure: { publish: ['*'] } });
  t.equal((await ask(a, 'publish', bearer(expired))).status, 401, 'an exp in the past is still refused');
  const later = await legacyToken({ nbf: Math.floor(Date.now() / 1000) + 600, mercure: { publish: ['*'] } });
  t.equal((await ask(a, 'publish', bearer(later))).status, 401, 'nbf is enforced');
  const none = `${Buffer.from('{"alg":"none","typ":"JWT"}').toString('base64url')}.${Buffer.from('{"mercure":{"publish":["*"]}}').toString('base64url')}.`;
  t.equal((await ask(a, 'publish', bearer(none))).status, 401, 'alg none');

  // The namespaced claim wins; the payloads: the entry's, else the claim's own.
  const both = await legacyToken(
    {
      mercure: { subscribe: ['*'] },
      'https://mercure.rocks/': {
        subscribe: [{ match: 'https://example.com/a', payload: { who: 'a' } }, 'https://example.com/{x}'],
        payload: { who: 'anyone' },
      },
    },
    { secret: SUBSCRIBER_SECRET },
  );
  const ns = await ask(a, 'subscribe', bearer(both));
  t.same(
    ns.grants.subscribe.map((s) => s.selector.match),
    ['https://example.com/a', 'https://example.com/{x}'],
  );
  const grants = ns.grants as never; // the grants as the hub holds them (exp aside)
  t.same(authz.payloadFor(grants, 'https://example.com/a'), { who: 'a' });
  t.same(
    authz.payloadFor(grants, 'https://example.com/b'),
    { who: 'anyone' },
    'a template entry without one',
  );
  t.same(authz.payloadFor(grants, 'elsewhere'), { who: 'anyone' }, 'no entry matches: the claim payload');

  // authorization_details win over the 0.x claim (it is dropped, as the reference hub does).
  const details = await legacyToken({
    mercure: { publish: ['*'] },
    authorization_details: [
      { type: 'https://mercure.rocks/authorization-detail', actions: ['publish'], topics: [{ match: 'x' }] },
    ],
  });
  t.same(selectors((await ask(a, 'publish', bearer(details))).grants), ['exact:x']);
});

t.test('0.x claims are parsed strictly: one bad entry rejects the token', async (t) => {
  const { app: a } = await hub(t, legacyConfigEnv());
  for (const [what, claim] of [
    ['publish not an array', { publish: '*' }],
    ['a null entry', { publish: [null] }],
    ['an object without match', { publish: [{ match_type: 'exact' }] }],
    ['an unknown match_type', { publish: [{ match: 'x', match_type: 'uritemplate' }] }],
    ['an invalid URL pattern', { publish: [{ match: '/(', match_type: 'urlpattern' }] }],
    ['a control character', { publish: ['a\u0000b'] }],
    ['101 entries', { publish: Array.from({ length: 101 }, (_, i) => `t${i}`) }],
    ['a template over 1024 characters', { publish: [`https://e/{x}${'a'.repeat(1024)}`] }],
    ['the claim not an object', ['*']],
  ] as const) {
    const r = await ask(a, 'publish', bearer(await legacyToken({ mercure: claim })));
    t.equal(r.status, 401, what);
  }
  const longExact = await legacyToken({ mercure: { publish: [`https://e/${'a'.repeat(1024)}`] } });
  t.equal((await ask(a, 'publish', bearer(longExact))).status, 401, 'any entry over 1024 characters');
  t.equal(
    (await ask(a, 'publish', bearer(await legacyToken({})))).status,
    200,
    'no claim: valid, grants nothing',
  );
});

t.test('a token naming a MERCURE_ISSUERS issuer keeps every 1.0 check; 1.0 tokens still pass', async (t) => {
  const { app: a } = await hub(t, legacyConfigEnv());
  const v1 = await mercureToken({ publish: ['*'] });
  t.equal((await ask(a, 'publish', bearer(v1))).status, 200, 'a 1.0 token in compatibility mode');
  const issuerNoTyp = await legacyToken(
    { iss: MERCURE_ISSUER, mercure: { publish: ['*'] } },
    { secret: MERCURE_SECRET },
  );
  t.equal(
    (await ask(a, 'publish', bearer(issuerNoTyp))).status,
    401,
    'the issuer’s tokens still need at+jwt',
  );
  const issuerNoAud = await mercureToken({ publish: ['*'], aud: 'https://other.example' });
  t.equal((await ask(a, 'publish', bearer(issuerNoAud))).status, 401, '... and aud');
  const byLegacyKey = await mercureToken({ publish: ['*'], secret: LEGACY_SECRET });
  t.equal((await ask(a, 'publish', bearer(byLegacyKey))).status, 401, 'never the 0.x key for a trusted iss');
});

t.test('without the setting every 0.x token and presentation keeps its 1.0 refusal', async (t) => {
  const { app: a } = await hub(t, mercureConfigEnv());
  const old = await legacyToken(
    { mercure: { publish: ['*'], subscribe: ['*'] } },
    { secret: MERCURE_SECRET },
  );
  t.equal((await ask(a, 'publish', bearer(old))).status, 401, 'signed with the issuer secret, no iss');
  const v1 = await mercureToken({ publish: ['*'], subscribe: ['*'] });
  t.equal((await ask(a, 'publish', {}, `?authorization=${v1}`)).status, 401, 'no token in the query');
  t.equal((await ask(a, 'subscribe', { cookie: `mercureAuthorization=${v1}` })).status, 401, 'no 0.x cookie');
});

t.test(
  '0.x presentation: the authorization query parameter and the mercureAuthorization cookie',
  async (t) => {
    const { app: a } = await hub(t, legacyConfigEnv({ mercurePublishOrigins: ['https://app.example.com'] }));
    const tok = await legacyToken({ mercure: { publish: ['*'], subscribe: ['*'] } });
    t.equal((await ask(a, 'subscribe', {}, `?authorization=${tok}`)).status, 200, 'in the query');
    t.equal(
      (await ask(a, 'subscribe', bearer(tok), '?authorization=garbage')).status,
      200,
      'the header wins',
    );
    t.equal(
      (await ask(a, 'subscribe', {}, `?authorization=${tok}&authorization=${tok}`)).status,
      401,
      'one value only',
    );
    t.equal(
      (await ask(a, 'subscribe', { cookie: `mercureAuthorization=${tok}` })).status,
      200,
      'the 0.x cookie',
    );
    t.equal(
      (
        await ask(a, 'subscribe', {
          cookie: `mercureAuthorization=garbage; __Secure-mercure_access_token=${tok}`,
        })
      ).status,
      200,
      'MERCURE_COOKIE first',
    );
    t.equal(
      (await ask(a, 'subscribe', { cookie: 'mercureAuthorization=garbage' }, `?authorization=${tok}`)).status,
      200,
      'the query before the cookies',
    );
    const cookie = `mercureAuthorization=${tok}`;
    t.equal(
      (await ask(a, 'publish', { cookie })).status,
      403,
      'a cookie publish still needs its origin (CSRF)',
    );
    t.equal((await ask(a, 'publish', { cookie, origin: 'https://app.example.com' })).status, 200);
    t.equal(
      (await ask(a, 'publish', {}, `?authorization=${tok}`)).status,
      200,
      'a query token is not ambient',
    );
  },
);

t.test('authorization values never reach a log; the request URL keeps them for the hub', async (t) => {
  t.equal(
    redactUrl('/.well-known/mercure?topic=a&authorization=eyJ.x.y&Authorization=z&access%5Ftoken=w'),
    '/.well-known/mercure?topic=a&authorization=[redacted]&Authorization=[redacted]&access%5Ftoken=[redacted]',
  );
  t.equal(
    redactUrl('/x?authorization=eyJ.x.y&access_token=w', ['access_token']),
    '/x?authorization=eyJ.x.y&access_token=[redacted]',
    'the in-place rewrite of the request URL takes access_token only',
  );
});
