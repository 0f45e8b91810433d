// Access-control edges: a token is one token whatever its encoding, HEAD on SSE routes answers at
// once, tokens in URLs never reach the log, internal queue streams are in no listing, and one
// clock-skew rule holds on first use, on later (cached) use and for open streams.
import { generateKeyPairSync } from 'node:crypto';
import http from 'node:http';
import { SignJWT } from 'jose';
import t from 'tap';
import { TokenCache } from '../src/auth/token-cache.ts';
import { CLOCK_TOLERANCE_S, mintToken } from '../src/auth/tokens.ts';
import { createVerifier } from '../src/auth/verifier.ts';
import { parseSse, textChunks } from '../src/client/sse.ts';
import { openSse, startTestServer, testDatabase, until } from './helpers.ts';

const SECRET = 'test-secret-0123456789-0123456789-abcdef';
const B64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

type Scopes = Parameters<typeof mintToken>[0]['scopes'];
const token = (scopes: Scopes, ttl: string | number = '1h') =>
  mintToken({ secret: SECRET, scopes, ttl, subject: 'edges' });

/**
 * The other encodings of the same signature: an HS256 signature is 32 bytes, 43 base64url characters
 * carrying 258 bits, so the last character's 2 low bits are unused and decoders ignore them.
 */
function variants(jwt: string): string[] {
  const last = jwt[jwt.length - 1];
  const i = B64URL.indexOf(last);
  const out: string[] = [];
  for (let k = 0; k < 4; k++) {
    const c = B64URL[(i & ~3) | k];
    if (c !== last) out.push(jwt.slice(0, -1) + c);
  }
  return out;
}

async function status(url: string, tok: string, headers: Record<string, string> = {}): Promise<number> {
  const res = await fetch(url, { headers: { authorization: `Bearer ${tok}`, ...headers } });
  await res.body?.cancel();
  return res.status;
}

/** A token with an explicit `exp` (seconds since the epoch). */
function expiringAt(exp: number): Promise<string> {
  return new SignJWT({ commitfeed: { subscribe: ['*'] } })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setIssuedAt(exp - 60)
    .setExpirationTime(exp)
    .sign(new TextEncoder().encode(SECRET));
}

t.test('a token is identified by its verified content, not its encoding', async (t) => {
  const verifier = await createVerifier({ jwtSecret: SECRET });
  const tok = await token({ subscribe: ['*'] });
  const vs = variants(tok);
  t.equal(vs.length, 3, 'three other encodings of the same signature');
  const original = await verifier.verify(tok);
  for (const v of vs) {
    const p = await verifier.verify(v);
    t.equal(p.tokenId, original.tokenId, 'a re-encoded signature is the same token');
  }
  const other = await verifier.verify(await token({ subscribe: ['*'] }, '2h'));
  t.not(other.tokenId, original.tokenId, 'another token has another identity');

  let verified = 0;
  const cache = new TokenCache({
    verify: (x) => {
      verified++;
      return verifier.verify(x);
    },
  });
  await cache.get(tok);
  for (const v of vs) await cache.get(v);
  t.equal(verified, 1, 'the cache knows every encoding of a verified token');
  const bad = `${tok.slice(0, tok.lastIndexOf('.') + 1)}${'A'.repeat(43)}`;
  await t.rejects(cache.get(bad), /signature/, 'a wrong signature is still checked');

  const withJti = (iat: number) =>
    new SignJWT({ commitfeed: { subscribe: ['*'] } })
      .setProtectedHeader({ alg: 'HS256' })
      .setJti('session-1')
      .setIssuedAt(iat)
      .sign(new TextEncoder().encode(SECRET));
  const now = Math.floor(Date.now() / 1000);
  t.equal(
    (await verifier.verify(await withJti(now))).tokenId,
    (await verifier.verify(await withJti(now - 1))).tokenId,
    'a `jti` names the token',
  );

  // ECDSA signatures are malleable: (r, n - s) verifies like (r, s), with other bytes.
  const { publicKey, privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const es = await createVerifier({
    jwtPublicKey: publicKey.export({ type: 'spki', format: 'pem' }) as string,
  });
  const signed = await new SignJWT({ commitfeed: { subscribe: ['*'] } })
    .setProtectedHeader({ alg: 'ES256' })
    .sign(privateKey);
  const sig = Buffer.from(signed.slice(signed.lastIndexOf('.') + 1), 'base64url');
  const n = 0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551n;
  const s2 = n - BigInt(`0x${sig.subarray(32).toString('hex')}`);
  const flipped = Buffer.concat([sig.subarray(0, 32), Buffer.from(s2.toString(16).padStart(64, '0'), 'hex')]);
  const twin = `${signed.slice(0, signed.lastIndexOf('.'))}.${flipped.toString('base64url')}`;
  t.not(twin, signed);
  t.equal(
    (await es.verify(twin)).tokenId,
    (await es.verify(signed)).tokenId,
    'an ECDSA twin is the same token',
  );

  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { jwtSecret: SECRET, maxSsePerToken: 2 });
  const u = `${server.url}/v1/streams/s/events`;
  t.equal(await status(u, vs[0]), 200, 'a re-encoded token is accepted');
  const a = await openSse(t, u, { authorization: `Bearer ${tok}` });
  const b = await openSse(t, u, { authorization: `Bearer ${vs[0]}` });
  t.equal(a.status, 200);
  t.equal(b.status, 200);
  for (const v of [tok, ...vs]) {
    t.equal(
      await status(u, v, { accept: 'text/event-stream' }),
      429,
      'every encoding counts against the one limit',
    );
  }
  a.close();
  b.close();
});

/** A HEAD request on a raw socket-level client; fails loudly when no answer comes within `ms`. */
function head(
  url: string,
  headers: Record<string, string>,
  ms = 3000,
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: number }> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: 'HEAD', headers }, (res) => {
      let body = 0;
      res.on('data', (d: Buffer) => (body += d.length));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.setTimeout(ms, () => req.destroy(new Error(`HEAD ${url}: no complete answer within ${ms} ms`)));
    req.on('error', reject);
    req.end();
  });
}

t.test('HEAD on an SSE route answers at once with the GET headers and holds nothing', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { jwtSecret: SECRET, maxSsePerToken: 1 });
  const tok = await token({ subscribe: ['*'], enqueue: ['jobs'] });
  const sse = { accept: 'text/event-stream', authorization: `Bearer ${tok}` };
  for (const path of ['/v1/streams/s/events', '/v1/events?stream=s&stream=t', '/v1/queues/jobs/events']) {
    // Twice with a limit of one: the first HEAD's slot must be free again.
    for (const round of [1, 2]) {
      const res = await head(`${server.url}${path}`, sse);
      t.equal(res.status, 200, `HEAD ${path} (${round}): the GET's status`);
      t.match(res.headers['content-type'], /^text\/event-stream/, `HEAD ${path}: the GET's content type`);
      t.equal(res.headers['cache-control'], 'no-cache, no-transform');
      t.equal(res.body, 0, 'no body');
      await until(() => server.feed.hub.subscriberCount === 0, 3000, `no subscriber left by HEAD ${path}`);
      await until(() => server.app.sseByToken.size === 0, 3000, `no connection slot left by HEAD ${path}`);
    }
  }
  const refused = await head(`${server.url}/v1/streams/s/events`, { accept: 'text/event-stream' });
  t.equal(refused.status, 401, 'HEAD without a token: the GET status');
  const json = await head(`${server.url}/v1/streams/s/events`, { authorization: `Bearer ${tok}` });
  t.equal(json.status, 200, 'HEAD of a JSON read');
  t.match(json.headers['content-type'], /^application\/json/);
  // A real stream still works after the HEADs.
  const live = await openSse(t, `${server.url}/v1/streams/s/events`, { authorization: `Bearer ${tok}` });
  t.equal(live.status, 200);
  live.close();
});

t.test('a token in the URL never reaches the log, however the URL spells its name', async (t) => {
  // pino writes to process.stdout itself once its write has been replaced: capture every log line.
  const lines: string[] = [];
  const write = process.stdout.write;
  process.stdout.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
    const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString();
    if (text.startsWith('{"level"')) {
      lines.push(text);
      return true;
    }
    return (write as (...a: unknown[]) => boolean).call(process.stdout, chunk, ...rest);
  }) as typeof process.stdout.write;
  t.teardown(() => {
    process.stdout.write = write;
  });
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { jwtSecret: SECRET, logLevel: 'debug' });
  const tok = await token({ subscribe: ['*'] });
  const signature = tok.slice(tok.lastIndexOf('.') + 1);
  const u = server.url;
  const cases: [string, number][] = [
    [`/v1/streams/s/events?access_token=${tok}`, 200],
    [`/v1/streams/s/events?access%5Ftoken=${tok}`, 200],
    [`/v1/streams/s/events?wait=0&access%5ftoken=${tok}&limit=5`, 200],
    [`/v1/streams/s/events?%61ccess%5Ftoken=${tok}`, 200],
    [`/v1/streams/s/events?ACCESS_TOKEN=${tok}`, 401],
    [`/v1/streams/s/events?Access%5FToken=${tok}`, 401],
    [`/v1/streams/s/events?access_token=${tok}&access_token=${tok}`, 401],
    [`/v1/streams/s/events?access_token=${tok}x`, 401],
    [`/v1/streams/s/events?access%5Ftoken=${tok}&limit=oops`, 400],
    [`/v1/nowhere?access%5Ftoken=${tok}`, 404],
    [`/v1/streams/s/events?access%5Ftoken=${tok}%`, 401],
  ];
  for (const [path, expected] of cases) {
    const res = await fetch(`${u}${path}`);
    await res.body?.cancel();
    t.equal(res.status, expected, `${path.replace(tok, '<jwt>')}: ${expected}`);
  }
  const sse = await openSse(t, `${u}/v1/streams/s/events?access%5Ftoken=${tok}`);
  t.equal(sse.status, 200);
  sse.close();
  await until(
    () => lines.filter((l) => l.includes('"incoming request"')).length >= cases.length + 1,
    5000,
    'every request logged',
  );
  await until(() => server.feed.hub.subscriberCount === 0, 3000, 'the stream closed');
  t.ok(lines.length > cases.length, `${lines.length} log lines captured`);
  t.ok(
    lines.some((l) => l.includes('access%5Ftoken=[redacted]')),
    'the parameter is still visible, its value is not',
  );
  const leaks = lines.filter((l) => l.includes(signature));
  t.same(leaks, [], 'no log line holds the token');
});

t.test('internal queue wake-up streams are in no user-visible listing', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { jwtSecret: SECRET });
  const u = server.url;
  const all = await token({ subscribe: ['*'], publish: ['*'] });
  const producer = await token({ enqueue: ['billing', 'zeta'] });
  for (const q of ['billing', 'zeta']) {
    const res = await fetch(`${u}/v1/queues/${q}/jobs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${producer}`, 'content-type': 'application/json' },
      body: JSON.stringify({ payload: 1 }),
    });
    t.equal(res.status, 201, `job enqueued on ${q}`);
  }
  for (const s of ['alpha', 'queue', 'queues.x', 'z']) {
    const res = await fetch(`${u}/v1/streams/${s}/events`, {
      method: 'POST',
      headers: { authorization: `Bearer ${all}`, 'content-type': 'application/json' },
      body: JSON.stringify({ data: s }),
    });
    t.equal(res.status, 201, `published to ${s}`);
  }
  const list = async (query = '') => {
    const res = await fetch(`${u}/v1/streams${query}`, { headers: { authorization: `Bearer ${all}` } });
    t.equal(res.status, 200);
    return (await res.json()) as { streams: { name: string }[]; more: boolean };
  };
  const full = await list();
  t.same(
    full.streams.map((s) => s.name),
    ['alpha', 'queue', 'queues.x', 'z'],
    'only user streams, to a token that may read every stream',
  );
  t.equal(full.more, false);
  const page = await list('?limit=2');
  t.same(
    page.streams.map((s) => s.name),
    ['alpha', 'queue'],
    'a page holds `limit` user streams',
  );
  t.equal(page.more, true, 'and says more follow');
  const four = await list('?limit=4');
  t.equal(four.streams.length, 4);
  t.equal(four.more, false, 'internal streams do not count as more');
  for (const path of ['/v1/streams/queue%2Fbilling/events', '/v1/events?stream=queue%2Fbilling']) {
    t.equal(await status(`${u}${path}`, all), 400, `${path}: not a readable stream`);
    t.equal(await status(`${u}${path}`, all, { accept: 'text/event-stream' }), 400, `${path} (SSE)`);
  }
});

t.test('one clock-skew rule: first use, cached use and open streams agree', async (t) => {
  t.equal(CLOCK_TOLERANCE_S, 5, 'the tolerance the cases below are built around');
  const cache = new TokenCache(await createVerifier({ jwtSecret: SECRET }));
  const now = Math.floor(Date.now() / 1000);
  const recent = await expiringAt(now - 3);
  const p = await cache.get(recent);
  t.ok(p, 'expired 3 s ago (within the tolerance): accepted on first use');
  t.equal(await cache.get(recent), p, 'and on the next use');
  const old = await expiringAt(now - 7);
  await t.rejects(cache.get(old), /expired/, 'expired 7 s ago: refused on first use');
  await t.rejects(cache.get(old), /expired/, 'and on the next use');

  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { jwtSecret: SECRET });
  const exp = Math.floor(Date.now() / 1000) + 1;
  const short = await expiringAt(exp);
  const res = await fetch(`${server.url}/v1/streams/s/events`, {
    headers: { accept: 'text/event-stream', authorization: `Bearer ${short}` },
  });
  t.equal(res.status, 200);
  const msgs = [];
  for await (const m of parseSse(textChunks(res.body!))) msgs.push(m);
  const endedAt = Date.now();
  t.equal(msgs[msgs.length - 1]?.event, 'auth-expired', 'the stream ends with auth-expired');
  const due = (exp + CLOCK_TOLERANCE_S) * 1000;
  t.ok(endedAt >= due, `not before exp + tolerance (ended ${endedAt - due} ms after it)`);
  t.ok(endedAt < due + 1500, `at exp + tolerance (ended ${endedAt - due} ms after it)`);
  t.equal(await status(`${server.url}/v1/streams/s/events`, short), 401, 'and the token is refused after');
});
