// Hostile input: malformed, oversized, injected and forged requests, each answered with the right
// 4xx and a stable code, nothing written to any table, and the service healthy afterwards.
import net from 'node:net';
import { sql } from 'kysely';
import t from 'tap';
import { mintToken } from '../src/auth/tokens.ts';
import { sqlClient, startTestServer, testDatabase } from './helpers.ts';

const SECRET = 'test-secret-0123456789-0123456789-abcdef';
const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');

interface Req {
  method?: string;
  path: string;
  headers?: Record<string, string>;
  body?: string | Uint8Array;
  /** Send with the all-scopes token (default true). */
  auth?: boolean;
}
type Case = [name: string, req: Req, status: number, code: string];

const json = (path: string, body: string, headers: Record<string, string> = {}): Req => ({
  method: 'POST',
  path,
  body,
  headers: { 'content-type': 'application/json', ...headers },
});
const get = (path: string, headers: Record<string, string> = {}): Req => ({ path, headers });
const pub = '/v1/streams/s/events';
const nested = (n: number) => `{"data":${'['.repeat(n)}${']'.repeat(n)}}`;
const bytes = (...parts: (string | number[])[]) =>
  Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p) : Buffer.from(p))));

/** Every row of every table in the service's schema (migration bookkeeping aside). */
async function rowCounts(db: ReturnType<typeof sqlClient>): Promise<Record<string, number>> {
  // Partitions are counted through their parent; the janitor's own log is not user data.
  const { rows } = await sql<{ name: string }>`
    select c.relname as name from pg_class c join pg_namespace n on n.oid = c.relnamespace
    where n.nspname = 'commitfeed' and c.relkind in ('r', 'p') and not c.relispartition
      and c.relname not like 'kysely%' and c.relname not like 'janitor%'
    order by 1`.execute(db);
  const counts: Record<string, number> = {};
  for (const { name } of rows) {
    const r = await sql<{
      n: number;
    }>`select count(*)::int as n from ${sql.table(`commitfeed.${name}`)}`.execute(db);
    counts[name] = r.rows[0].n;
  }
  return counts;
}

/** One request on a raw socket (what fetch refuses to send); resolves with the status line's code. */
function raw(port: number, text: string | Buffer): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1');
    let got = '';
    s.setTimeout(5000, () => s.destroy(new Error('raw request timed out')));
    s.on('data', (d) => {
      got += d.toString('latin1');
      const m = /^HTTP\/1\.1 (\d{3})/.exec(got);
      if (m) {
        resolve(Number(m[1]));
        s.destroy();
      }
    });
    s.on('error', reject);
    s.on('close', () => resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(got)?.[1] ?? 0)));
    s.write(text);
  });
}

t.test('hostile requests', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, {
    jwtSecret: SECRET,
    maxBodyBytes: 64 * 1024,
    maxEventBytes: 8 * 1024,
  });
  const db = sqlClient(t, dbUrl);
  const all = await mintToken({ secret: SECRET, scopes: { publish: ['*'], subscribe: ['*'] }, ttl: '1h' });
  const onlyA = await mintToken({ secret: SECRET, scopes: { publish: ['a'], subscribe: ['a'] }, ttl: '1h' });
  const expired = await mintToken({ secret: SECRET, scopes: { publish: ['*'] }, ttl: -60 });
  const [h, , sig] = all.split('.');
  const forged = `${h}.${b64({ commitfeed: { publish: ['*'], admin: true } })}.${sig}`;
  const algNone = `${b64({ alg: 'none' })}.${b64({ commitfeed: { publish: ['*'] } })}.`;
  const before = await rowCounts(db);

  const cases: Case[] = [
    // Malformed JSON and body shapes
    ['bad JSON', json(pub, '{"data":'), 400, 'invalid_json'],
    ['trailing garbage', json(pub, '{"data":1} x'), 400, 'invalid_json'],
    ['empty body', json(pub, ''), 400, 'invalid_json'],
    ['JSON null', json(pub, 'null'), 400, 'invalid_request'],
    ['JSON number', json(pub, '42'), 400, 'invalid_request'],
    ['__proto__ key', json(pub, '{"data":1,"__proto__":{"admin":true}}'), 400, 'invalid_json'],
    [
      'constructor.prototype',
      json(pub, '{"data":{"constructor":{"prototype":{"x":1}}}}'),
      400,
      'invalid_json',
    ],
    ['deep nesting (100k levels)', json(pub, nested(30000)), 400, 'too_deep'],
    ['deep nesting (65 levels)', json(pub, nested(65)), 400, 'too_deep'],
    [
      'invalid UTF-8 byte',
      { ...json(pub, ''), body: bytes('{"data":"a', [0xff], 'b"}') },
      400,
      'invalid_json',
    ],
    [
      'overlong UTF-8 "/"',
      { ...json(pub, ''), body: bytes('{"data":"', [0xc0, 0xaf], '"}') },
      400,
      'invalid_json',
    ],
    [
      'UTF-8 encoded surrogate',
      { ...json(pub, ''), body: bytes('{"data":"', [0xed, 0xa0, 0x80], '"}') },
      400,
      'invalid_json',
    ],
    [
      'truncated UTF-8',
      { ...json(pub, ''), body: bytes('{"data":"', [0xe2, 0x82], '"}') },
      400,
      'invalid_json',
    ],
    // Sizes and counts
    [
      'body over MAX_BODY_BYTES',
      json(pub, JSON.stringify({ data: 'x'.repeat(70 * 1024) })),
      413,
      'body_too_large',
    ],
    [
      'event data over MAX_EVENT_BYTES',
      json(pub, JSON.stringify({ data: 'x'.repeat(9000) })),
      413,
      'event_too_large',
    ],
    [
      'batch over 1000 events',
      json(pub, JSON.stringify(Array.from({ length: 1001 }, () => ({ data: 0 })))),
      400,
      'invalid_request',
    ],
    ['empty batch', json(pub, '[]'), 400, 'invalid_request'],
    [
      'batch with one bad event',
      json(pub, JSON.stringify([{ data: 1 }, { data: 2, type: 'a\nb' }, { data: 3 }])),
      400,
      'invalid_request',
    ],
    [
      'transaction over 1000 ops',
      json(
        '/v1/tx',
        JSON.stringify({ ops: Array.from({ length: 1001 }, () => ({ publish: { stream: 's', data: 0 } })) }),
      ),
      400,
      'invalid_request',
    ],
    [
      'transaction op on a forbidden stream',
      json('/v1/tx', '{"ops":[{"publish":{"stream":"b","data":1}}]}', { authorization: `Bearer ${onlyA}` }),
      403,
      'forbidden',
    ],
    // Names
    ['NUL in stream name', json('/v1/streams/a%00b/events', '{"data":1}'), 400, 'invalid_name'],
    ['newline in stream name', json('/v1/streams/a%0Ab/events', '{"data":1}'), 400, 'invalid_name'],
    [
      'CRLF header injection in name',
      json('/v1/streams/a%0D%0ASet-Cookie:%20x=1/events', '{"data":1}'),
      400,
      'invalid_name',
    ],
    [
      'SQL in stream name',
      json(`/v1/streams/${encodeURIComponent("s';drop table commitfeed.feed;--")}/events`, '{"data":1}'),
      400,
      'invalid_name',
    ],
    [
      'path traversal in name',
      json('/v1/streams/..%2F..%2Fetc%2Fpasswd/events', '{"data":1}'),
      400,
      'invalid_name',
    ],
    ['non-ASCII stream name', json('/v1/streams/%C3%B6rders/events', '{"data":1}'), 400, 'invalid_name'],
    [
      'stream name of 201 characters',
      json(`/v1/streams/${'a'.repeat(201)}/events`, '{"data":1}'),
      400,
      'invalid_name',
    ],
    ['stream name of 2000 characters', get(`/v1/streams/${'a'.repeat(2000)}/events`), 400, 'invalid_name'],
    ['bad name among many', get('/v1/events?stream=a&stream=b%00'), 400, 'invalid_name'],
    [
      '101 streams on one connection',
      get(`/v1/events?${Array.from({ length: 101 }, (_, i) => `stream=s${i}`).join('&')}`),
      400,
      'invalid_request',
    ],
    // Event fields: an SSE field must never carry a line break
    [
      'type with LF (frame injection)',
      json(pub, '{"data":1,"type":"x\\ndata: forged"}'),
      400,
      'invalid_request',
    ],
    ['type with CR', json(pub, '{"data":1,"type":"x\\rid: 9-9"}'), 400, 'invalid_request'],
    ['type with NUL', json(pub, '{"data":1,"type":"x\\u0000"}'), 400, 'invalid_request'],
    ['type with lone surrogate', json(pub, '{"data":1,"type":"x\\ud800"}'), 400, 'invalid_request'],
    [
      'type of 201 characters',
      json(pub, JSON.stringify({ data: 1, type: 't'.repeat(201) })),
      400,
      'invalid_request',
    ],
    ['key with NUL', json(pub, '{"data":1,"key":"k\\u0000"}'), 400, 'invalid_request'],
    ['key with lone surrogate', json(pub, '{"data":1,"key":"\\udc00"}'), 400, 'invalid_request'],
    [
      'key of 201 characters',
      json(pub, JSON.stringify({ data: 1, key: 'k'.repeat(201) })),
      400,
      'invalid_request',
    ],
    ['unknown event property', json(pub, '{"data":1,"id":"9-9"}'), 400, 'invalid_request'],
    // Numbers
    ['number overflow in data', json(pub, '{"data":1e400}'), 400, 'invalid_json'],
    ['long digit run in data', json(pub, `{"data":${'9'.repeat(400)}}`), 400, 'invalid_json'],
    ['limit overflow', get(`${pub}?limit=99999999999999999999`), 400, 'invalid_request'],
    ['limit 1e309', get(`${pub}?limit=1e309`), 400, 'invalid_request'],
    ['negative limit', get(`${pub}?limit=-1`), 400, 'invalid_request'],
    ['wait NaN', get(`${pub}?wait=NaN`), 400, 'invalid_request'],
    ['wait Infinity (a long-poll forever)', get(`${pub}?wait=Infinity`), 400, 'invalid_request'],
    ['wait 1e400', get(`${pub}?wait=1e400`), 400, 'invalid_request'],
    // Cursors
    ['cursor past 2^53', get(`${pub}?after=9999999999999999-1`), 400, 'invalid_cursor'],
    ['cursor of 17 digits', get(`${pub}?after=12345678901234567-1`), 400, 'invalid_cursor'],
    ['negative cursor', get(`${pub}?after=-1-5`), 400, 'invalid_cursor'],
    ['NUL in cursor', get(`${pub}?after=1-1%00`), 400, 'invalid_cursor'],
    ['SQL in Last-Event-ID', get(pub, { 'last-event-id': "1-1' or '1'='1" }), 400, 'invalid_cursor'],
    [
      'huge Last-Event-ID (SSE)',
      get(pub, { 'last-event-id': '9'.repeat(8000), accept: 'text/event-stream' }),
      400,
      'invalid_cursor',
    ],
    ['SQL in from', get(`${pub}?from=${encodeURIComponent("earliest' OR 1=1 --")}`), 400, 'invalid_request'],
    ['unknown parameter', get(`${pub}?debug=1`), 400, 'unknown_parameter'],
    // Methods and content types
    ['DELETE a stream', { method: 'DELETE', path: pub }, 404, 'not_found'],
    ['PUT an event', { ...json(pub, '{"data":1}'), method: 'PUT' }, 404, 'not_found'],
    [
      'text/plain body',
      json(pub, '{"data":1}', { 'content-type': 'text/plain' }),
      415,
      'unsupported_media_type',
    ],
    [
      'form post (CSRF shape)',
      json(pub, 'data=1', { 'content-type': 'application/x-www-form-urlencoded' }),
      415,
      'unsupported_media_type',
    ],
    [
      'multipart body',
      json(pub, '--x\r\n\r\n--x--', { 'content-type': 'multipart/form-data; boundary=x' }),
      415,
      'unsupported_media_type',
    ],
    // Tokens
    ['no token', { ...json(pub, '{"data":1}'), auth: false }, 401, 'unauthorized'],
    ['forged payload', json(pub, '{"data":1}', { authorization: `Bearer ${forged}` }), 401, 'unauthorized'],
    ['alg none', json(pub, '{"data":1}', { authorization: `Bearer ${algNone}` }), 401, 'unauthorized'],
    ['expired token', json(pub, '{"data":1}', { authorization: `Bearer ${expired}` }), 401, 'unauthorized'],
    [
      'garbage token in cookie',
      { ...json(pub, '{"data":1}', { cookie: 'commitfeed_token=%00%ff' }), auth: false },
      401,
      'unauthorized',
    ],
    [
      'oversized token',
      json(pub, '{"data":1}', { authorization: `Bearer ${'a'.repeat(9000)}` }),
      401,
      'unauthorized',
    ],
    [
      'two bearer tokens',
      json(pub, '{"data":1}', { authorization: `Bearer ${all} ${all}` }),
      401,
      'unauthorized',
    ],
    [
      'token for another stream',
      json(pub, '{"data":1}', { authorization: `Bearer ${onlyA}` }),
      403,
      'forbidden',
    ],
    [
      'read another stream with a cursor',
      get(`${pub}?after=0-0`, { authorization: `Bearer ${onlyA}` }),
      403,
      'forbidden',
    ],
  ];

  for (const [name, req, status, code] of cases) {
    const headers: Record<string, string> = { ...(req.headers ?? {}) };
    if (req.auth !== false && !headers.authorization) headers.authorization = `Bearer ${all}`;
    const res = await fetch(`${server.url}${req.path}`, {
      method: req.method ?? 'GET',
      headers,
      body: req.body as BodyInit,
    });
    const text = await res.text();
    let body: { statusCode?: number; code?: string; message?: string } = {};
    try {
      body = JSON.parse(text);
    } catch {
      // reported by the checks below
    }
    t.equal(res.status, status, `${name}: status`);
    t.equal(body.code, code, `${name}: code (${body.message ?? text.slice(0, 120)})`);
    t.equal(body.statusCode, status, `${name}: JSON error body`);
  }

  // What fetch refuses to send: broken framing and header injection, straight on the socket.
  const port = Number(new URL(server.url).port);
  const rawCases: [string, string][] = [
    ['bare CR in a header', `GET ${pub} HTTP/1.1\r\nHost: x\r\nLast-Event-ID: 1-1\rX-Evil: 1\r\n\r\n`],
    ['NUL in the request line', `GET /v1/streams/a\0b/events HTTP/1.1\r\nHost: x\r\n\r\n`],
    ['unknown method', `BREW ${pub} HTTP/1.1\r\nHost: x\r\n\r\n`],
    [
      'Content-Length and chunked together (smuggling)',
      `POST ${pub} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
    ],
    [
      'negative Content-Length',
      `POST ${pub} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: -1\r\n\r\n`,
    ],
  ];
  for (const [name, text] of rawCases) {
    const status = await raw(port, text);
    t.ok(status >= 400 && status < 500, `${name}: ${status} (a 4xx)`);
  }

  t.same(await rowCounts(db), before, 'nothing was written to any table');
  t.ok(Object.keys(before).includes('feed'), 'the feed table was among those checked');

  // Healthy afterwards: probes pass, and a normal publish and read work.
  t.equal((await fetch(`${server.url}/healthz`)).status, 200);
  t.equal((await fetch(`${server.url}/readyz`)).status, 200);
  const auth = { authorization: `Bearer ${all}`, 'content-type': 'application/json' };
  // SQL-looking data is data: stored and served verbatim.
  const evil = "'); drop table commitfeed.feed; --";
  const ok = await fetch(`${server.url}${pub}`, {
    method: 'POST',
    headers: auth,
    body: JSON.stringify({ data: evil }),
  });
  t.equal(ok.status, 201);
  const read = await fetch(`${server.url}${pub}?from=earliest&wait=5`, { headers: auth });
  const page = (await read.json()) as { events: { data: unknown }[] };
  t.same(
    page.events.map((e) => e.data),
    [evil],
  );
  t.ok(cases.length + rawCases.length >= 40, `${cases.length + rawCases.length} hostile requests`);
});
