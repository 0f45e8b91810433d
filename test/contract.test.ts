// The API contract for bad input: JSON bodies are validated as sent (no type coercion), query strings
// keep their documented number parsing, and every 400 has the same shape and names the one field and
// rule that failed, on every route.
import t from 'tap';
import { jobRows } from './queue-helpers.ts';
import { feedRows, sqlClient, startTestServer, testDatabase } from './helpers.ts';

type ErrorBody = { statusCode: number; error: string; code: string; message: string };

t.test('bad bodies and queries: one 400 naming the field and rule, nothing written', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl);
  const db = sqlClient(t, dbUrl);
  const send = async (method: string, path: string, body?: string) => {
    const res = await fetch(`${server.url}${path}`, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body,
    });
    return { status: res.status, body: (await res.json()) as ErrorBody };
  };
  const ev = '/v1/streams/s/events';
  const jobs = '/v1/queues/q/jobs';
  // [what, method, path, body, code, message]
  const cases: [string, string, string, string | undefined, string, string][] = [
    // Values that Ajv's coercion used to convert silently.
    ['number type', 'POST', ev, '{"data":1,"type":5}', 'invalid_request', 'body/type must be string'],
    ['boolean type', 'POST', ev, '{"data":1,"type":true}', 'invalid_request', 'body/type must be string'],
    ['array type', 'POST', ev, '{"data":1,"type":["a"]}', 'invalid_request', 'body/type must be string'],
    ['number key', 'POST', ev, '{"data":1,"key":7}', 'invalid_request', 'body/key must be string'],
    [
      'number type in a batch',
      'POST',
      ev,
      '[{"data":1},{"data":2,"type":5}]',
      'invalid_request',
      'body/1/type must be string',
    ],
    [
      'string priority',
      'POST',
      jobs,
      '{"payload":1,"priority":"3"}',
      'invalid_request',
      'body/priority must be integer',
    ],
    [
      'string delay',
      'POST',
      jobs,
      '{"payload":1,"delay":"5"}',
      'invalid_request',
      'body/delay must be number',
    ],
    ['number job key', 'POST', jobs, '{"payload":1,"key":9}', 'invalid_request', 'body/key must be string'],
    [
      'string backoff jitter',
      'POST',
      jobs,
      '{"payload":1,"backoff":{"jitter":"false"}}',
      'invalid_request',
      'body/backoff/jitter must be boolean',
    ],
    [
      'string claim max',
      'POST',
      '/v1/queues/q/claim',
      '{"max":"2"}',
      'invalid_request',
      'body/max must be integer',
    ],
    [
      'null claim wait',
      'POST',
      '/v1/queues/q/claim',
      '{"wait":null}',
      'invalid_request',
      'body/wait must be number',
    ],
    [
      'number lease',
      'POST',
      '/v1/queues/q/jobs/1/ack',
      '{"lease":5}',
      'invalid_request',
      'body/lease must be string',
    ],
    // One mistake, one message (the publish and enqueue bodies are one item or an array of them).
    ['missing data', 'POST', ev, '{"type":"x"}', 'invalid_request', 'body/data is required'],
    [
      'unknown property',
      'POST',
      ev,
      '{"data":1,"extra":2}',
      'invalid_request',
      'body/extra is not a known property',
    ],
    [
      'missing data in a batch',
      'POST',
      ev,
      '[{"data":1},{"type":"x"}]',
      'invalid_request',
      'body/1/data is required',
    ],
    ['not an object', 'POST', ev, '"hello"', 'invalid_request', 'body must be object'],
    ['empty batch', 'POST', ev, '[]', 'invalid_request', 'body must NOT have fewer than 1 items'],
    ['missing payload', 'POST', jobs, '{"delay":1}', 'invalid_request', 'body/payload is required'],
    [
      'unknown job property',
      'POST',
      jobs,
      '{"payload":1,"color":"red"}',
      'invalid_request',
      'body/color is not a known property',
    ],
    [
      'bad job in a batch',
      'POST',
      jobs,
      '[{"payload":1},{"payload":2,"delay":-5}]',
      'invalid_request',
      'body/1/delay must be >= 0',
    ],
    ['tx without ops', 'POST', '/v1/tx', '{}', 'invalid_request', 'body/ops is required'],
    ['tx ops not an array', 'POST', '/v1/tx', '{"ops":{}}', 'invalid_request', 'body/ops must be array'],
    [
      'tx unknown property',
      'POST',
      '/v1/tx',
      '{"ops":[],"x":1}',
      'invalid_request',
      'body/x is not a known property',
    ],
    // Query strings: one message too, with the parameter named.
    [
      'unknown parameter',
      'GET',
      `${ev}?foo=1`,
      undefined,
      'unknown_parameter',
      'query/foo is not a known parameter',
    ],
    [
      'limit not a number',
      'GET',
      `${ev}?limit=ten`,
      undefined,
      'invalid_request',
      'query/limit must be integer',
    ],
    ['wait too long', 'GET', `${ev}?wait=31`, undefined, 'invalid_request', 'query/wait must be <= 30'],
    ['multi without stream', 'GET', '/v1/events', undefined, 'invalid_request', 'query/stream is required'],
  ];
  for (const [what, method, path, body, code, message] of cases) {
    const res = await send(method, path, body);
    t.equal(res.status, 400, `${what}: status`);
    t.same(
      res.body,
      { statusCode: 400, error: 'Bad Request', code, message },
      `${what}: one error naming the field`,
    );
    t.same(Object.keys(res.body).sort(), ['code', 'error', 'message', 'statusCode'], `${what}: shape`);
  }

  // Ops of /v1/tx are checked one by one; a wrongly typed field there is a 400 too.
  for (const [what, op] of [
    ['tx publish with a number type', { publish: { stream: 's', data: 1, type: 5 } }],
    ['tx publish with a number key', { publish: { stream: 's', data: 1, key: 5 } }],
    ['tx enqueue with a string priority', { enqueue: { queue: 'q', payload: 1, priority: '3' } }],
  ] as const) {
    const res = await send('POST', '/v1/tx', JSON.stringify({ ops: [op] }));
    t.equal(res.status, 400, `${what}: status`);
    t.equal(res.body.code, 'invalid_request', `${what}: code`);
    t.match(
      res.body.message,
      /^ops\[0\]\.(publish|enqueue)\.(type|key|priority) /,
      `${what}: names the field`,
    );
  }

  t.equal((await feedRows(db)).length, 0, 'no event was written');
  t.equal((await jobRows(db)).length, 0, 'no job was written');
});

t.test('query strings keep their number parsing; bodies of the right type are accepted', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl);
  const post = (path: string, body: unknown) =>
    fetch(`${server.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  const one = await post('/v1/streams/s/events', { data: 1, type: 'created', key: 'k1' });
  t.equal(one.status, 201, 'a well-typed event is published');
  t.equal((await post('/v1/streams/s/events', [{ data: 2 }, { data: 3, type: 'x' }])).status, 201, 'batch');
  t.equal((await post('/v1/queues/q/jobs', { payload: 1, priority: 3, delay: 0 })).status, 201, 'job');
  const read = await fetch(`${server.url}/v1/streams/s/events?from=earliest&limit=2&wait=0`);
  t.equal(read.status, 200, '?limit=2&wait=0 parsed as numbers');
  const page = (await read.json()) as { events: { type: string | null }[] };
  t.equal(page.events.length, 2, 'limit applied');
  t.equal(page.events[0].type, 'created', 'the type is stored as sent');
  const multi = await fetch(`${server.url}/v1/events?stream=s&from=earliest&limit=10`);
  t.equal(multi.status, 200, 'a single ?stream= is still read as a list');
  t.equal(((await multi.json()) as { events: unknown[] }).events.length, 3);
  const claim = await post('/v1/queues/q/claim', { max: 1 });
  t.equal(claim.status, 200, 'claim with a numeric max');
  t.equal(((await claim.json()) as { jobs: unknown[] }).jobs.length, 1);
});
