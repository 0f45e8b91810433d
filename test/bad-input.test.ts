// Every bad input gets a 4xx with a stable code and writes nothing.
import t from 'tap';
import { feedRows, sqlClient, startTestServer, testDatabase } from './helpers.ts';

t.test('bad input table', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { maxBodyBytes: 4096, maxEventBytes: 1024 });
  const db = sqlClient(t, dbUrl);
  const json = { 'content-type': 'application/json' };
  const post = (path: string, body: string, headers: Record<string, string> = json) => ({
    method: 'POST',
    path,
    body,
    headers,
  });
  const get = (path: string, headers: Record<string, string> = {}) => ({ method: 'GET', path, headers });
  const cases: [
    string,
    { method: string; path: string; body?: string; headers: Record<string, string> },
    number,
    string,
  ][] = [
    [
      'wrong content type',
      post('/v1/streams/s/events', '{"data":1}', { 'content-type': 'text/plain' }),
      415,
      'unsupported_media_type',
    ],
    ['no content type', post('/v1/streams/s/events', '{"data":1}', {}), 415, 'unsupported_media_type'],
    ['invalid JSON', post('/v1/streams/s/events', '{"data":'), 400, 'invalid_json'],
    ['empty body', post('/v1/streams/s/events', ''), 400, 'invalid_json'],
    ['missing data', post('/v1/streams/s/events', '{"type":"x"}'), 400, 'invalid_request'],
    ['unknown property', post('/v1/streams/s/events', '{"data":1,"extra":2}'), 400, 'invalid_request'],
    ['not an object', post('/v1/streams/s/events', '"hello"'), 400, 'invalid_request'],
    ['empty batch', post('/v1/streams/s/events', '[]'), 400, 'invalid_request'],
    [
      'batch too long',
      post('/v1/streams/s/events', JSON.stringify(Array.from({ length: 1001 }, () => ({ data: 0 })))),
      413,
      'body_too_large',
    ],
    ['type with newline', post('/v1/streams/s/events', '{"data":1,"type":"a\\nb"}'), 400, 'invalid_request'],
    ['type not a string', post('/v1/streams/s/events', '{"data":1,"type":{}}'), 400, 'invalid_request'],
    ['empty key', post('/v1/streams/s/events', '{"data":1,"key":""}'), 400, 'invalid_request'],
    ['bad stream name (space)', post('/v1/streams/bad%20name/events', '{"data":1}'), 400, 'invalid_name'],
    ['bad stream name (slash)', post('/v1/streams/a%2Fb/events', '{"data":1}'), 400, 'invalid_name'],
    [
      'stream name too long',
      post(`/v1/streams/${'a'.repeat(201)}/events`, '{"data":1}'),
      400,
      'invalid_name',
    ],
    [
      'oversized body',
      post('/v1/streams/s/events', JSON.stringify({ data: 'x'.repeat(5000) })),
      413,
      'body_too_large',
    ],
    [
      'oversized event data',
      post('/v1/streams/s/events', JSON.stringify({ data: 'x'.repeat(2000) })),
      413,
      'event_too_large',
    ],
    ['malformed after', get('/v1/streams/s/events?after=abc'), 400, 'invalid_cursor'],
    [
      'malformed Last-Event-ID (JSON)',
      get('/v1/streams/s/events', { 'last-event-id': '12' }),
      400,
      'invalid_cursor',
    ],
    [
      'malformed Last-Event-ID (SSE)',
      get('/v1/streams/s/events', { 'last-event-id': 'x-1', accept: 'text/event-stream' }),
      400,
      'invalid_cursor',
    ],
    ['unknown query parameter', get('/v1/streams/s/events?foo=1'), 400, 'unknown_parameter'],
    ['bad from', get('/v1/streams/s/events?from=yesterday'), 400, 'invalid_request'],
    ['limit too big', get('/v1/streams/s/events?limit=1001'), 400, 'invalid_request'],
    ['limit not a number', get('/v1/streams/s/events?limit=ten'), 400, 'invalid_request'],
    ['wait too long', get('/v1/streams/s/events?wait=31'), 400, 'invalid_request'],
    ['multi-stream without stream', get('/v1/events'), 400, 'invalid_request'],
    ['multi-stream bad name', get('/v1/events?stream=ok&stream=no%20way'), 400, 'invalid_name'],
    ['unknown route', get('/v1/nothing'), 404, 'not_found'],
  ];
  for (const [name, req, status, code] of cases) {
    const res = await fetch(`${server.url}${req.path}`, {
      method: req.method,
      headers: req.headers,
      body: req.body,
    });
    const body = (await res.json()) as { statusCode: number; code: string; message: string; error: string };
    t.equal(res.status, status, `${name}: status`);
    t.equal(body.code, code, `${name}: code`);
    t.equal(body.statusCode, status, `${name}: body statusCode`);
    t.ok(typeof body.message === 'string' && body.message.length > 0, `${name}: message`);
  }
  t.equal((await feedRows(db)).length, 0, 'nothing was written');
});
