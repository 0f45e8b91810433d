// Every bad queue request gets a 4xx with a stable code and writes nothing.
import { sql } from 'kysely';
import t from 'tap';
import { feedRows, sqlClient, startTestServer, testDatabase } from './helpers.ts';
import { type Body, jobRows } from './queue-helpers.ts';

t.test('bad input: 4xx with a stable code, nothing written', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { maxBodyBytes: 8192, maxEventBytes: 1024 });
  const db = sqlClient(t, dbUrl);
  const json = { 'content-type': 'application/json' };
  const post = (path: string, body: string, headers: Record<string, string> = json) => ({
    path,
    body,
    headers,
  });
  const q = '/v1/queues/q';
  const cases: [
    string,
    { path: string; body?: string; headers: Record<string, string>; method?: string },
    number,
    string,
  ][] = [
    ['bad queue name (space)', post('/v1/queues/bad%20name/jobs', '{"payload":1}'), 400, 'invalid_name'],
    ['bad queue name (slash)', post('/v1/queues/a%2Fb/jobs', '{"payload":1}'), 400, 'invalid_name'],
    ['queue name too long', post(`/v1/queues/${'a'.repeat(201)}/jobs`, '{"payload":1}'), 400, 'invalid_name'],
    ['missing payload', post(`${q}/jobs`, '{"delay":1}'), 400, 'invalid_request'],
    ['unknown property', post(`${q}/jobs`, '{"payload":1,"color":"red"}'), 400, 'invalid_request'],
    ['negative delay', post(`${q}/jobs`, '{"payload":1,"delay":-1}'), 400, 'invalid_request'],
    ['delay not a number', post(`${q}/jobs`, '{"payload":1,"delay":"soon"}'), 400, 'invalid_request'],
    ['bad runAt', post(`${q}/jobs`, '{"payload":1,"runAt":"tomorrow"}'), 400, 'invalid_request'],
    [
      'delay and runAt',
      post(`${q}/jobs`, '{"payload":1,"delay":1,"runAt":"2030-01-01T00:00:00Z"}'),
      400,
      'invalid_request',
    ],
    ['fractional priority', post(`${q}/jobs`, '{"payload":1,"priority":1.5}'), 400, 'invalid_request'],
    ['maxAttempts 0', post(`${q}/jobs`, '{"payload":1,"maxAttempts":0}'), 400, 'invalid_request'],
    ['empty key', post(`${q}/jobs`, '{"payload":1,"key":""}'), 400, 'invalid_request'],
    ['key with NUL', post(`${q}/jobs`, '{"payload":1,"key":"a\\u0000b"}'), 400, 'invalid_request'],
    [
      'bad backoff type',
      post(`${q}/jobs`, '{"payload":1,"backoff":{"type":"linear"}}'),
      400,
      'invalid_request',
    ],
    ['empty batch', post(`${q}/jobs`, '[]'), 400, 'invalid_request'],
    [
      'one bad job in a batch',
      post(`${q}/jobs`, '[{"payload":1},{"payload":2,"delay":-5}]'),
      400,
      'invalid_request',
    ],
    [
      'oversized payload',
      post(`${q}/jobs`, JSON.stringify({ payload: 'x'.repeat(2000) })),
      413,
      'payload_too_large',
    ],
    [
      'oversized body',
      post(`${q}/jobs`, JSON.stringify({ payload: 'x'.repeat(9000) })),
      413,
      'body_too_large',
    ],
    ['invalid JSON', post(`${q}/jobs`, '{"payload":'), 400, 'invalid_json'],
    [
      'wrong content type',
      post(`${q}/jobs`, '{"payload":1}', { 'content-type': 'text/plain' }),
      415,
      'unsupported_media_type',
    ],
    ['claim max 0', post(`${q}/claim`, '{"max":0}'), 400, 'invalid_request'],
    ['claim max 101', post(`${q}/claim`, '{"max":101}'), 400, 'invalid_request'],
    ['claim wait 31', post(`${q}/claim`, '{"wait":31}'), 400, 'invalid_request'],
    ['claim negative wait', post(`${q}/claim`, '{"wait":-1}'), 400, 'invalid_request'],
    ['claim lease 0', post(`${q}/claim`, '{"lease":0}'), 400, 'invalid_request'],
    ['claim unknown field', post(`${q}/claim`, '{"limit":3}'), 400, 'invalid_request'],
    ['claim bad name', post('/v1/queues/no%20way/claim', '{}'), 400, 'invalid_name'],
    ['ack without lease', post(`${q}/jobs/1/ack`, '{}'), 400, 'invalid_request'],
    ['ack malformed id', post(`${q}/jobs/abc/ack`, '{"lease":"x"}'), 400, 'invalid_id'],
    ['ack unknown id', post(`${q}/jobs/424242/ack`, '{"lease":"x"}'), 404, 'job_not_found'],
    ['nack unknown id', post(`${q}/jobs/424242/nack`, '{"lease":"x"}'), 404, 'job_not_found'],
    ['nack negative delay', post(`${q}/jobs/1/nack`, '{"lease":"x","delay":-1}'), 400, 'invalid_request'],
    ['extend without seconds', post(`${q}/jobs/1/extend`, '{"lease":"x"}'), 400, 'invalid_request'],
    ['extend unknown id', post(`${q}/jobs/424242/extend`, '{"lease":"x","seconds":5}'), 404, 'job_not_found'],
    ['batch ack not an array', post(`${q}/ack`, '{"id":"1","lease":"x"}'), 400, 'invalid_request'],
    ['batch ack bad id', post(`${q}/ack`, '[{"id":"one","lease":"x"}]'), 400, 'invalid_request'],
    [
      'dead list bad limit',
      { path: `${q}/dead?limit=0`, headers: {}, method: 'GET' },
      400,
      'invalid_request',
    ],
    [
      'dead list unknown parameter',
      { path: `${q}/dead?foo=1`, headers: {}, method: 'GET' },
      400,
      'unknown_parameter',
    ],
    ['redrive malformed id', { path: `${q}/dead/x1/retry`, headers: {} }, 400, 'invalid_id'],
    ['redrive unknown id', { path: `${q}/dead/424242/retry`, headers: {} }, 404, 'job_not_found'],
    ['stats bad name', { path: '/v1/queues/a%20b', headers: {}, method: 'GET' }, 400, 'invalid_name'],
    ['pause bad name', { path: '/v1/queues/a%20b/pause', headers: {} }, 400, 'invalid_name'],
    // An unknown queue is not made by pausing it (it would be listed, empty, from then on).
    ['pause unknown queue', { path: `${q}/pause`, headers: {} }, 404, 'queue_not_found'],
    ['resume unknown queue', { path: `${q}/resume`, headers: {} }, 404, 'queue_not_found'],
    [
      'watch malformed cursor',
      { path: `${q}/events?after=x`, headers: {}, method: 'GET' },
      400,
      'invalid_cursor',
    ],
  ];
  for (const [name, req, status, code] of cases) {
    const res = await fetch(`${server.url}${req.path}`, {
      method: req.method ?? 'POST',
      headers: req.headers,
      body: req.method === 'GET' || req.body === '' ? undefined : req.body,
    });
    const body = (await res.json()) as Body;
    t.equal(res.status, status, `${name}: status`);
    t.equal(body.code, code, `${name}: code`);
    t.equal(body.statusCode, status, `${name}: body statusCode`);
    t.ok(typeof body.message === 'string' && body.message.length > 0, `${name}: message`);
  }
  t.same(await jobRows(db), [], 'no job was written');
  t.same(await feedRows(db), [], 'no feed row was written');
  const { rows } = await sql<{ n: number }>`select count(*)::int as n from commitfeed.queues`.execute(db);
  t.equal(rows[0].n, 0, 'no queue was created');
});
