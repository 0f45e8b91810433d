// Webhooks against a real PostgreSQL and a real receiver process that verifies every delivery with
// the standardwebhooks library: endpoints over REST (the secret shown once, never again), delivery of
// exactly the committed events (deduplicated on webhook-id) through 500s, a receiver down for a while,
// a slow one past the timeout, and a 410; ordered endpoints never reorder; concurrent ones deliver
// every event; refused destinations; secret rotation; resends and replays.
import { sql } from 'kysely';
import t from 'tap';
import { Webhook } from 'standardwebhooks';
import { mintToken } from '../src/auth/tokens.ts';
import { messageOf } from '../src/webhooks/message.ts';
import { signatures } from '../src/webhooks/signing.ts';
import { publish, sqlClient, startTestServer, testDatabase, until } from './helpers.ts';
import { type Body, api } from './queue-helpers.ts';
import { Receiver, committed, receiverPort, webhookConfig } from './webhook-helpers.ts';

const create = (base: string, body: object) => api(base, 'POST', '/v1/webhooks', body);
const events = (n: number, from = 0) =>
  Array.from({ length: n }, (_, i) => ({ type: 'created', data: { n: from + i } }));

t.test('endpoints over REST: the secret once, bad input refused, refused destinations', async (t) => {
  const server = await startTestServer(t, await testDatabase(t), webhookConfig());
  const made = await create(server.url, {
    name: 'orders-hook',
    url: 'http://example.com/hook',
    streams: ['orders', 'billing.*'],
    types: ['created', 'paid'],
    headers: { 'x-extra': 'yes' },
    description: 'orders to the shop',
    mode: 'ordered',
    timeoutSeconds: 2,
  });
  t.equal(made.status, 201, JSON.stringify(made.body));
  const secret: string = made.body.secret;
  t.match(secret, /^whsec_[A-Za-z0-9+/]+=*$/, 'a Standard Webhooks secret');
  t.equal(Buffer.from(secret.slice(6), 'base64').length, 32);
  t.match(made.body, {
    name: 'orders-hook',
    streams: ['orders', 'billing.*'],
    types: ['created', 'paid'],
    mode: 'ordered',
    concurrency: 1,
    timeoutSeconds: 2,
    enabled: true,
    backlog: { pending: 0, failed: 0 },
  });
  const list = await api(server.url, 'GET', '/v1/webhooks');
  const one = await api(server.url, 'GET', '/v1/webhooks/orders-hook');
  t.equal(list.body.webhooks.length, 1);
  t.equal(one.body.name, 'orders-hook');
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  for (const [what, text] of [
    ['list', JSON.stringify(list.body)],
    ['show', JSON.stringify(one.body)],
    ['metrics', metrics],
  ]) {
    t.notOk(text.includes(secret.slice(6, 30)), `no secret in the ${what}`);
    t.notOk(text.includes('"secret"'), `no secret field in the ${what}`);
  }
  t.match(metrics, /commitfeed_webhook_enabled\{endpoint="orders-hook"\} 1/);

  const patched = await api(server.url, 'PATCH', '/v1/webhooks/orders-hook', {
    enabled: false,
    description: null,
  });
  t.match(patched.body, { enabled: false, disabledReason: 'disabled over the API', description: null });
  t.match((await api(server.url, 'PATCH', '/v1/webhooks/orders-hook', { enabled: true })).body, {
    enabled: true,
    disabledReason: null,
  });

  const bad: [object, number, string][] = [
    [{ name: 'x', streams: ['a'] }, 400, 'invalid_request'],
    [{ name: 'x', url: 'ftp://example.com/', streams: ['a'] }, 400, 'invalid_url'],
    [{ name: 'x', url: 'not a url', streams: ['a'] }, 400, 'invalid_url'],
    [{ name: 'x', url: 'http://10.1.2.3/', streams: ['a'] }, 400, 'webhook_url_refused'],
    [
      { name: 'x', url: 'http://169.254.169.254/latest/meta-data', streams: ['a'] },
      400,
      'webhook_url_refused',
    ],
    [{ name: 'x', url: 'http://[::1]:8080/', streams: ['a'] }, 400, 'webhook_url_refused'],
    [{ name: 'x', url: 'http://[::ffff:10.0.0.1]/', streams: ['a'] }, 400, 'webhook_url_refused'],
    [{ name: 'x', url: 'http://0x7f.0.0.2/', streams: ['a'] }, 400, 'webhook_url_refused'],
    [{ name: 'x', url: 'http://example.com/', streams: [] }, 400, 'invalid_request'],
    [{ name: 'x', url: 'http://example.com/', streams: ['a/b'] }, 400, 'invalid_request'],
    [
      { name: 'x', url: 'http://example.com/', streams: ['a'], headers: { 'webhook-id': 'x' } },
      400,
      'invalid_header',
    ],
    [
      { name: 'x', url: 'http://example.com/', streams: ['a'], mode: 'ordered', concurrency: 4 },
      400,
      'invalid_request',
    ],
    [{ name: 'orders-hook', url: 'http://example.com/', streams: ['a'] }, 409, 'webhook_exists'],
  ];
  for (const [body, status, code] of bad) {
    const res = await create(server.url, body);
    t.match(res, { status, body: { code } }, `${JSON.stringify(body)} → ${status} ${code}`);
  }
  t.equal(
    (await api(server.url, 'GET', '/v1/webhooks')).body.webhooks.length,
    1,
    'nothing written by bad input',
  );
  t.equal((await api(server.url, 'DELETE', '/v1/webhooks/orders-hook')).status, 204);
  t.equal((await api(server.url, 'GET', '/v1/webhooks/orders-hook')).status, 404);
  t.equal((await api(server.url, 'DELETE', '/v1/webhooks/orders-hook')).status, 404);
  const subs = (await api(server.url, 'GET', '/v1/subscriptions')).body.subscriptions as Body[];
  t.same(subs, [], 'its stream subscription went with it');
});

t.test("the body carries the data as written; signatures are the standard's", async (t) => {
  // json_build_object's text: a type holding the separator, data last with its own spacing.
  const payload =
    '{"subscription" : "webhook:x", "stream" : "s", "type" : "a\\"data\\" : 1", "key" : null, ' +
    '"cursor" : "7-9", "time" : "2026-12-06T02:13:20.123Z", "data" : {"big" : 12345678901234567890, "s" : "}"}}';
  const m = messageOf(payload);
  t.equal(m.id, '7-9');
  t.equal(
    m.body,
    '{"type":"a\\"data\\" : 1","stream":"s","id":"7-9","time":"2026-12-06T02:13:20.123Z",' +
      '"data":{"big" : 12345678901234567890, "s" : "}"}}',
  );
  const secret = `whsec_${Buffer.alloc(32, 3).toString('base64')}`;
  const ts = Math.floor(Date.now() / 1000);
  const mine = signatures([secret], m.id, ts, m.body);
  t.equal(
    mine,
    new Webhook(secret).sign(m.id, new Date(ts * 1000), m.body),
    'as the reference library signs',
  );
});

t.test(
  'ordered: exactly the committed events, in order, through 500s, a receiver down, timeouts',
  async (t) => {
    const dbUrl = await testDatabase(t);
    const server = await startTestServer(t, dbUrl, webhookConfig());
    const db = sqlClient(t, dbUrl);
    const rx = new Receiver(t, await receiverPort(0));
    await rx.start();
    const made = await create(server.url, {
      name: 'ordered',
      url: rx.url,
      streams: ['orders.*'],
      mode: 'ordered',
      timeoutSeconds: 0.4,
      headers: { 'x-extra': 'sent' },
    });
    t.equal(made.status, 201, JSON.stringify(made.body));
    await rx.control({ secrets: [made.body.secret] });
    // Not delivered: another stream, and an internal one.
    await publish(server.url, 'other', events(3));
    await publish(server.url, 'orders.a', events(10));
    await rx.control({ statusSeq: [500, 500, 503, 500] });
    await publish(server.url, 'orders.b', events(10, 10));
    await until(() => rx.deliveredIds().length >= 12, 20_000, 'deliveries past the 500s');
    // The receiver goes away while events commit, and comes back.
    await rx.stop();
    await publish(server.url, 'orders.a', events(10, 20));
    await until(
      async () => (await api(server.url, 'GET', '/v1/webhooks/ordered')).body.failingSince !== null,
      10_000,
      'attempts to fail while the receiver is down',
    );
    await rx.start();
    // Slow: answers after the timeout, so commitfeed retries what the receiver saw (a duplicate).
    await rx.control({ delayMs: 600 });
    const seen = rx.deliveries().length;
    await until(() => rx.deliveries().length >= seen + 3, 20_000, 'slow deliveries');
    await rx.control({ delayMs: 0 });
    const want = await committed(db, '^orders\\.');
    t.equal(want.length, 30);
    await until(() => rx.deliveredIds().length >= 30, 30_000, 'every event delivered');
    t.same(
      rx.deliveredIds(),
      want,
      'exactly the committed events, deduplicated on webhook-id, in feed order',
    );
    const all = rx.deliveries();
    t.ok(all.length > 30, `duplicates and failures happened (${all.length} deliveries)`);
    const index = new Map(want.map((c, i) => [c, i]));
    const order = all.map((d) => index.get(d.id) ?? -1);
    t.notOk(order.includes(-1), 'nothing else was delivered');
    t.ok(
      order.every((v, i) => i === 0 || v >= order[i - 1]),
      'ordered: no delivery of an event before an earlier one was delivered',
    );
    t.ok(
      all.every((d) => d.verified.length === 1),
      'every delivery verified by standardwebhooks',
    );
    t.ok(
      all.every((d) => d.extra === 'sent'),
      'the extra header on every delivery',
    );
    const body = JSON.parse(all[0].body) as Body;
    t.same(Object.keys(body), ['type', 'stream', 'id', 'time', 'data']);
    t.match(body, { type: 'created', stream: 'orders.a', id: want[0], data: { n: 0 } });
    t.ok(Math.abs(Date.parse(body.time) - Date.now()) < 120_000, 'time is when the event was written');

    // The receiver logs a delivery before it answers; the attempt is recorded after the answer.
    let show: Body;
    await until(
      async () => {
        show = (await api(server.url, 'GET', '/v1/webhooks/ordered')).body;
        return show.delivered >= 30 && show.backlog.pending === 0;
      },
      10_000,
      'the last attempts recorded',
    );
    t.match(show, { backlog: { pending: 0, failed: 0 }, failingSince: null });
    t.ok(show.delivered >= 30 && show.failedAttempts > 0, JSON.stringify(show));
    const log = (await api(server.url, 'GET', '/v1/webhooks/ordered/attempts?limit=1000')).body
      .attempts as Body[];
    t.ok(
      log.some((a) => a.status === 500 && a.response === 'answered 500'),
      'the log keeps the response',
    );
    t.ok(
      log.some((a) => /timed out/.test(a.error ?? '')),
      'and timeouts',
    );
    t.ok(
      log.some((a) => a.status === null && a.error !== null),
      'and connection failures',
    );
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    t.match(metrics, /commitfeed_webhook_attempts_total\{endpoint="ordered",outcome="delivered"\} \d+/);
    t.match(metrics, /commitfeed_webhook_backlog\{endpoint="ordered"\} 0/);
    // An internal stream matches no glob, a committed event of another stream is not delivered.
    t.equal(
      (
        await sql<{
          n: number;
        }>`select count(*)::int as n from commitfeed.feed where stream = 'other'`.execute(db)
      ).rows[0].n,
      3,
    );
  },
);

t.test('concurrent: every event once after deduplication; 410 disables; enabling resumes', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, webhookConfig());
  const db = sqlClient(t, dbUrl);
  const rx = new Receiver(t, await receiverPort(1));
  await rx.start();
  const made = await create(server.url, {
    name: 'many',
    url: rx.url,
    streams: ['jobs'],
    types: ['created'],
    mode: 'concurrent',
    concurrency: 8,
    timeoutSeconds: 2,
    from: 'earliest',
  });
  await rx.control({
    secrets: [made.body.secret],
    statusSeq: Array.from({ length: 60 }, (_, i) => (i % 3 ? 200 : 500)),
  });
  for (let i = 0; i < 10; i++)
    await publish(server.url, 'jobs', [...events(20, i * 20), { type: 'skipped', data: 0 }]);
  const want = await committed(db, '^jobs$', 'created');
  // A delivery whose settlement failed (the database refusing a connection, say) waits for its
  // lease: 2 s of timeout + 5 s, on a loaded machine more.
  const delivered = (n: number, what: string) =>
    until(() => rx.deliveredIds().length >= n, 30_000, what).catch(async (err) => {
      const e = (await api(server.url, 'GET', '/v1/webhooks/many')).body;
      throw new Error(`${err.message}: ${rx.deliveredIds().length} delivered; ${JSON.stringify(e)}`);
    });
  await delivered(200, 'every event delivered');
  t.same(rx.deliveredIds().sort(), want.sort(), 'exactly the committed events of the type');
  t.ok(
    rx.deliveries().every((d) => d.verified.length === 1),
    'every delivery verified',
  );

  // 410 Gone: the endpoint is disabled, with the reason; what comes meanwhile waits.
  await rx.control({ status: 410 });
  await publish(server.url, 'jobs', events(5, 1000));
  await until(
    async () => (await api(server.url, 'GET', '/v1/webhooks/many')).body.enabled === false,
    10_000,
    'disabled',
  );
  const shown = (await api(server.url, 'GET', '/v1/webhooks/many')).body;
  t.match(shown, { enabled: false, disabledReason: /410 Gone/ });
  await rx.control({ status: 200 });
  await until(
    async () => (await api(server.url, 'GET', '/v1/webhooks/many')).body.backlog.pending === 5,
    10_000,
    'kept',
  );
  t.match((await api(server.url, 'PATCH', '/v1/webhooks/many', { enabled: true })).body, { enabled: true });
  await delivered(205, 'the waiting deliveries after enabling');
});

t.test('refused destinations: a name resolving to loopback, without the allowlist', async (t) => {
  const server = await startTestServer(
    t,
    await testDatabase(t),
    webhookConfig({ WEBHOOK_ALLOW_ADDRESSES: '' }),
  );
  const rx = new Receiver(t, await receiverPort(2));
  await rx.start();
  for (const url of ['http://127.0.0.1:1/', 'http://127.1.2.3/', 'http://[::1]/']) {
    t.match(await create(server.url, { name: 'x', url, streams: ['a'] }), {
      status: 400,
      body: { code: 'webhook_url_refused' },
    });
  }
  const made = await create(server.url, {
    name: 'local',
    url: `http://localhost:${rx.port}/hook`,
    streams: ['a'],
    mode: 'ordered',
  });
  t.equal(made.status, 201, 'a name is resolved when connecting, not at creation');
  await publish(server.url, 'a', events(1));
  await until(
    async () => (await api(server.url, 'GET', '/v1/webhooks/local/attempts')).body.attempts.length >= 2,
    10_000,
    'attempts',
  );
  const [attempt] = (await api(server.url, 'GET', '/v1/webhooks/local/attempts')).body.attempts;
  t.match(attempt, {
    ok: false,
    status: null,
    error: /refused to connect: localhost resolves to (127\.0\.0\.1|::1), a loopback/,
  });
  t.same(rx.deliveries(), [], 'nothing reached the receiver');
});

t.test('secret rotation: both signatures during the overlap, then only the new one', async (t) => {
  const server = await startTestServer(t, await testDatabase(t), webhookConfig());
  const rx = new Receiver(t, await receiverPort(3));
  await rx.start();
  const made = await create(server.url, { name: 'rot', url: rx.url, streams: ['r'], mode: 'ordered' });
  const s1: string = made.body.secret;
  const r2 = await api(server.url, 'POST', '/v1/webhooks/rot/rotate-secret', { overlapSeconds: 60 });
  t.equal(r2.status, 200);
  const s2: string = r2.body.secret;
  t.not(s2, s1);
  t.ok(Date.parse(r2.body.previousValidUntil) > Date.now() + 50_000);
  await rx.control({ secrets: [s1, s2] });
  await publish(server.url, 'r', events(1));
  await until(() => rx.deliveredIds().length === 1, 10_000, 'the first delivery');
  t.same(rx.deliveries()[0].verified, [0, 1], 'verified with the old and with the new secret');
  t.notOk(JSON.stringify((await api(server.url, 'GET', '/v1/webhooks/rot')).body).includes(s2.slice(6, 30)));
  const r3 = await api(server.url, 'POST', '/v1/webhooks/rot/rotate-secret', { overlapSeconds: 0 });
  await rx.control({ secrets: [s1, s2, r3.body.secret] });
  await publish(server.url, 'r', events(1, 1));
  await until(() => rx.deliveredIds().length === 2, 10_000, 'the second delivery');
  t.same(rx.deliveries()[1].verified, [2], 'after an overlap of 0 only the newest secret signs');
});

t.test(
  'recovery: resend one, resend failed since, replay from earliest and from a trimmed cursor',
  async (t) => {
    const dbUrl = await testDatabase(t);
    const server = await startTestServer(t, dbUrl, webhookConfig({ WEBHOOK_RETRY_SCHEDULE: '0,50ms' }));
    const db = sqlClient(t, dbUrl);
    const rx = new Receiver(t, await receiverPort(4));
    await rx.start({ WH_STATUS: '500' });
    const made = await create(server.url, { name: 'rec', url: rx.url, streams: ['s'], concurrency: 2 });
    await rx.control({ secrets: [made.body.secret] });
    await publish(server.url, 's', events(4));
    const want = await committed(db, '^s$');
    await until(
      async () => (await api(server.url, 'GET', '/v1/webhooks/rec')).body.backlog.failed === 4,
      10_000,
      'every delivery failed after its 2 attempts',
    );
    t.equal(rx.deliveries().length, 8);
    await rx.control({ status: 200 });
    const since = new Date(Date.now() - 60_000).toISOString();
    t.same((await api(server.url, 'POST', '/v1/webhooks/rec/resend', { failedSince: since })).body, {
      resent: 4,
    });
    await until(() => rx.deliveredIds().length === 4, 10_000, 'the failed deliveries resent');
    t.same(rx.deliveredIds().sort(), [...want].sort());

    const before = rx.deliveries().length;
    t.same((await api(server.url, 'POST', '/v1/webhooks/rec/resend', { event: want[2] })).body, {
      resent: 1,
    });
    await until(() => rx.deliveries().length === before + 1, 10_000, 'one event resent');
    t.equal(rx.deliveries().at(-1)!.id, want[2], 'with the same webhook-id');
    t.match(await api(server.url, 'POST', '/v1/webhooks/rec/resend', { event: '1-1' }), {
      status: 404,
      body: { code: 'event_not_found' },
    });

    const replay = await api(server.url, 'POST', '/v1/webhooks/rec/replay', { from: 'earliest' });
    t.match(replay.body, { from: 'earliest', lost: false });
    await until(() => rx.deliveries().length === before + 5, 10_000, 'every event again');
    // A cursor below the trim mark: the events after it that retention dropped are reported lost.
    await sql`update commitfeed.trim_mark set txid = '5', id = 5`.execute(db);
    t.match((await api(server.url, 'POST', '/v1/webhooks/rec/replay', { from: '1-1' })).body, {
      lost: true,
      trimMark: '5-5',
    });
  },
);

t.test('a rate limit spaces deliveries out; failing for WEBHOOK_DISABLE_AFTER disables', async (t) => {
  const config = webhookConfig({ WEBHOOK_DISABLE_AFTER: '1s', WEBHOOK_RETRY_SCHEDULE: '0,100ms' });
  const server = await startTestServer(t, await testDatabase(t), config);
  const rx = new Receiver(t, await receiverPort(5));
  await rx.start();
  const made = await create(server.url, { name: 'slow', url: rx.url, streams: ['rl'], rateLimit: 5 });
  await rx.control({ secrets: [made.body.secret] });
  await publish(server.url, 'rl', events(10));
  await until(() => rx.deliveredIds().length === 10, 20_000, 'every delivery');
  const at = rx.deliveries().map((d) => d.at);
  // A burst of 6 (one second's worth, and the token the worker took before its claim waited), then
  // 5 a second: the last 4 take at least 800 ms.
  t.ok(
    Math.max(...at) - Math.min(...at) >= 750,
    `10 deliveries at 5/s took ${Math.max(...at) - Math.min(...at)} ms`,
  );

  await rx.control({ status: 500 });
  const failing = await create(server.url, { name: 'failing', url: rx.url, streams: ['f'] });
  await rx.control({ secrets: [failing.body.secret], status: 500 });
  for (let i = 0; i < 15; i++) {
    await publish(server.url, 'f', events(1, i));
    const e = (await api(server.url, 'GET', '/v1/webhooks/failing')).body;
    if (!e.enabled) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  await until(
    async () => (await api(server.url, 'GET', '/v1/webhooks/failing')).body.enabled === false,
    10_000,
    'disabled after failing for a second',
  );
  t.match((await api(server.url, 'GET', '/v1/webhooks/failing')).body, {
    disabledReason: /^every attempt failed since /,
  });
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  t.match(metrics, /commitfeed_webhook_disabled_total 1/);
  t.match(metrics, /commitfeed_webhook_enabled\{endpoint="failing"\} 0/);
});

t.test('the webhook routes are administration', async (t) => {
  const secret = 'test-secret-0123456789-0123456789-abcdef';
  const server = await startTestServer(t, await testDatabase(t), { ...webhookConfig(), jwtSecret: secret });
  const admin = await mintToken({ secret, scopes: { admin: true }, ttl: '1h', subject: 'ops' });
  const reader = await mintToken({
    secret,
    scopes: { subscribe: ['*'], publish: ['*'] },
    ttl: '1h',
    subject: 'app',
  });
  const call = async (method: string, path: string, token?: string, body?: unknown) =>
    (
      await fetch(`${server.url}${path}`, {
        method,
        headers: {
          ...(token ? { authorization: `Bearer ${token}` } : {}),
          ...(body ? { 'content-type': 'application/json' } : {}),
        },
        body: body ? JSON.stringify(body) : undefined,
      })
    ).status;
  const body = { name: 'a', url: 'http://example.com/', streams: ['a'] };
  t.equal(await call('POST', '/v1/webhooks', undefined, body), 401);
  t.equal(await call('POST', '/v1/webhooks', reader, body), 403);
  t.equal(await call('GET', '/v1/webhooks', reader), 403);
  t.equal(await call('POST', '/v1/webhooks', admin, body), 201);
  t.equal(await call('GET', '/v1/webhooks/a/attempts', reader), 403);
  t.equal(await call('POST', '/v1/webhooks/a/rotate-secret', reader, {}), 403);
  t.equal(await call('GET', '/v1/webhooks/a', admin), 200);
  t.equal(await call('POST', '/v1/webhooks/a/rotate-secret', admin), 200, 'a rotation needs no body');
});
