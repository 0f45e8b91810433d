// The TypeScript client against the real server (publish, subscribe, resume across a restart and a
// 503, typed errors, queues and the work loop), and against a scripted SSE server for the frames a
// real server only sends under faults (`event: unavailable`, `event: reset`, silence, 5xx, 4xx).
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { sql } from 'kysely';
import t from 'tap';
import { BACKOFF_MAX_MS, backoffDelay } from '../src/client/backoff.ts';
import { CommitfeedClient, CommitfeedError, type StreamEvent } from '../src/client/index.ts';
import { openSse, sleep, sqlClient, startTestServer, testDatabase, until } from './helpers.ts';

/** Collects a `Subscription`'s events in the background. */
function collect<T>(iter: AsyncIterable<StreamEvent<T>>) {
  const events: StreamEvent<T>[] = [];
  let error: unknown;
  const done = (async () => {
    try {
      for await (const e of iter) events.push(e);
    } catch (err) {
      error = err;
    }
  })();
  return {
    events,
    done,
    get error() {
      return error;
    },
    async waitFor(n: number, ms = 15000) {
      const deadline = Date.now() + ms;
      while (events.length < n) {
        if (Date.now() > deadline) throw new Error(`expected ${n} events, got ${events.length}`);
        await sleep(20);
      }
      return events.slice(0, n);
    },
  };
}

t.test('publish, publishBatch and typed errors', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const cf = new CommitfeedClient({ url: server.url });
  const a = await cf.publish('orders', { n: 1 }, { type: 'created', key: 'o-1' });
  t.match(
    a,
    { stream: 'orders', duplicate: false, id: /^\d+-\d+\.[0-9a-f]{8}$/ },
    'a tagged cursor, passed through',
  );
  const again = await cf.publish('orders', { n: 1 }, { type: 'created', key: 'o-1' });
  t.same(again, { ...a, duplicate: true }, 'idempotent by key');
  const batch = await cf.publishBatch('orders', [{ data: 2 }, { data: 3, type: 'paid' }]);
  t.equal(batch.length, 2);

  const err = await cf.publish('bad name!', 1).catch((e: unknown) => e);
  t.ok(err instanceof CommitfeedError, 'a CommitfeedError');
  t.match(err, { status: 400, code: 'invalid_name', retryable: false });
  const empty = await cf.publishBatch('orders', []).catch((e: unknown) => e);
  t.match(empty, { status: 400, code: 'invalid_request' });
  const down = new CommitfeedClient('http://127.0.0.1:1');
  t.match(await down.publish('x', 1).catch((e: unknown) => e), {
    status: 0,
    code: 'network_error',
    retryable: true,
  });
});

t.test('subscribe: history then live, one or several streams, in order', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const cf = new CommitfeedClient(server.url);
  const first = await cf.publish('a', { i: 0 }, { type: 'created' });
  const sub = cf.subscribe<{ i: number }>('a', { from: 'earliest' });
  t.teardown(() => sub.close());
  const got = collect(sub);
  const multiSub = cf.subscribe(['a', 'b'], { after: first.id });
  t.teardown(() => multiSub.close());
  const multi = collect(multiSub);
  await cf.publish('b', { i: 1 });
  await cf.publish('a', { i: 2 });
  t.same(
    (await got.waitFor(2)).map((e) => [e.type, e.data.i]),
    [
      ['created', 0],
      ['message', 2],
    ],
  );
  t.same(
    (await multi.waitFor(2)).map((e) => e.data),
    [{ i: 1 }, { i: 2 }],
    'one connection, both streams, after the given cursor',
  );
  t.equal(sub.lastId, got.events[1].id, 'lastId follows the events');
  sub.close();
  await got.done;
  t.equal(got.error, undefined, 'close() ends the iterator normally');

  const bad = collect(cf.subscribe('no spaces allowed'));
  await bad.done;
  t.match(bad.error, { status: 400, code: 'invalid_name' }, 'a 4xx ends the subscription with a typed error');
});

t.test('subscribe survives a server restart: nothing lost, nothing repeated', async (t) => {
  const dbUrl = await testDatabase(t);
  let server = await startTestServer(t, dbUrl);
  const port = Number(new URL(server.url).port);
  const cf = new CommitfeedClient(server.url);
  const reconnects: (string | undefined)[] = [];
  const sub = cf.subscribe<number>('r', {
    backoff: { initialMs: 50, maxMs: 400 },
    onReconnect: (i) => reconnects.push(i.lastId),
  });
  t.teardown(() => sub.close());
  const got = collect(sub);
  // Live from the connect point: wait until the primed id arrived.
  await until(() => sub.lastId !== undefined, 10000, 'the primed id');
  const primed = sub.lastId;
  for (let i = 0; i < 3; i++) await cf.publish('r', i);
  await got.waitFor(3);

  await server.close();
  // Committed while no server runs (written straight to the feed, as an outbox write would be).
  const db = sqlClient(t, dbUrl);
  await sql`insert into commitfeed.feed (stream, data) values ('r', '3'), ('r', '4')`.execute(db);
  // The drop, then at least one attempt against the closed port, before a server listens again.
  await until(() => reconnects.length >= 2, 10000, 'a reconnect attempt against the closed port');
  server = await startTestServer(t, dbUrl, { port });
  for (let i = 5; i < 8; i++) await cf.publish('r', i);

  const events = await got.waitFor(8);
  t.same(
    events.map((e) => e.data),
    [0, 1, 2, 3, 4, 5, 6, 7],
    'every event once, in order',
  );
  await sleep(200); // a duplicate would arrive right behind the last event: give it the chance
  t.equal(got.events.length, 8, 'nothing repeated');
  t.ok(reconnects.length >= 1, `reconnected (${reconnects.length} attempts)`);
  t.equal(reconnects[0], events[2].id, 'resumed after the last event received');
  t.not(primed, events[0].id);
  sub.close();
});

t.test('subscribe retries a 503 (connection limit) with Retry-After, then resumes', async (t) => {
  const server = await startTestServer(t, await testDatabase(t), { maxSseConnections: 1 });
  const cf = new CommitfeedClient(server.url);
  const holder = await openSse(t, `${server.url}/v1/streams/x/events`);
  const errors: string[] = [];
  const sub = cf.subscribe('x', {
    from: 'earliest',
    backoff: { initialMs: 50 },
    onReconnect: (i) => errors.push(`${i.error.status} ${i.error.code}`),
  });
  t.teardown(() => sub.close());
  const got = collect(sub);
  await cf.publish('x', 'first');
  await until(() => errors.length > 0, 10000, 'the refused connection to be retried');
  holder.close();
  t.same(
    (await got.waitFor(1)).map((e) => e.data),
    ['first'],
  );
  t.match(errors[0], /^503 /, 'the 503 was retried');
});

/** A scripted SSE server: each connection gets the next handler; records the Last-Event-ID it saw. */
async function scriptedServer(
  t: { teardown(fn: () => unknown): void },
  script: ((req: http.IncomingMessage, res: http.ServerResponse) => void)[],
) {
  const seen: (string | undefined)[] = [];
  let n = 0;
  const server = http.createServer((req, res) => {
    seen.push(req.headers['last-event-id'] as string | undefined);
    const step = script[Math.min(n++, script.length - 1)];
    step(req, res);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

const sse = (res: http.ServerResponse, body: string, end = true) => {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  res.write(body);
  if (end) res.end();
};

t.test('subscribe follows unavailable, reset, 5xx and silence; a 4xx stops it', async (t) => {
  const resets: unknown[] = [];
  const { url, seen } = await scriptedServer(t, [
    // 1: primed id, one event, then the server's database-lost frame.
    (_q, res) =>
      sse(
        res,
        'retry: 10\nid: 1-0\n\nid: 1-1\ndata: 1\n\nevent: unavailable\ndata: {"code":"unavailable","message":"db down"}\nretry: 10\n\n',
      ),
    // 2: a 500 with a JSON body.
    (_q, res) => {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end('{"statusCode":500,"code":"internal","message":"boom"}');
    },
    // 3: the cursor fell behind retention: reset, then the stream continues on the same connection.
    (_q, res) =>
      sse(
        res,
        'id: 1-1\n\nevent: reset\ndata: {"reason":"trimmed","resumeFrom":"5-0"}\n\nid: 5-1\nevent: created\ndata: {"x":2}\n\n',
      ),
    // 4: a user event whose type is "unavailable" (it has an id: it is an event), then silence.
    (_q, res) => sse(res, 'id: 5-2\nevent: unavailable\ndata: 3\n\n', false),
    // 5: after the idle timeout, a 4xx: not retryable.
    (_q, res) => {
      res.writeHead(403, { 'content-type': 'application/json' });
      res.end('{"statusCode":403,"code":"forbidden","message":"no"}');
    },
  ]);
  const cf = new CommitfeedClient(url);
  const got = collect(
    cf.subscribe('s', {
      after: '0-5',
      idleTimeoutMs: 300,
      backoff: { initialMs: 10, maxMs: 50 },
      onReset: (i) => resets.push(i),
    }),
  );
  await got.done;
  t.same(
    got.events.map((e) => [e.id, e.type, e.data]),
    [
      ['1-1', 'message', 1],
      ['5-1', 'created', { x: 2 }],
      ['5-2', 'unavailable', 3],
    ],
  );
  t.same(resets, [{ reason: 'trimmed', resumeFrom: '5-0', lastId: '1-1' }], 'reset reported');
  t.same(seen, ['0-5', '1-1', '1-1', '5-1', '5-2'], 'each reconnect resumed from the last id');
  t.match(got.error, { status: 403, code: 'forbidden' });
  t.ok(got.error instanceof CommitfeedError);
});

t.test('reconnect waits are capped at a few seconds, jittered, never before the server hint', async (t) => {
  for (let attempt = 1; attempt <= 40; attempt++) {
    const d = backoffDelay(attempt, 0, undefined);
    const base = Math.min(BACKOFF_MAX_MS, 250 * 2 ** (attempt - 1));
    if (d > BACKOFF_MAX_MS || d < base * 0.8) t.fail(`attempt ${attempt}: ${d} ms`);
    const hinted = backoffDelay(attempt, 2000, undefined);
    if (hinted < 2000 || hinted > BACKOFF_MAX_MS)
      t.fail(`attempt ${attempt} after Retry-After 2: ${hinted} ms`);
  }
  t.ok(BACKOFF_MAX_MS <= 5000, `the cap is a few seconds (${BACKOFF_MAX_MS} ms)`);
  t.equal(backoffDelay(40, 10_000, undefined), 10_000, "a server's longer hint wins over the cap");
  t.ok(backoffDelay(40, 0, { maxMs: 60_000 }) > 40_000, 'maxMs sets another cap');

  // Through a run of failures — 503s, a dropped connection, a proxy's 502 — the subscription keeps
  // reconnecting, each wait within the cap, and resumes when a stream is served.
  const { url, seen } = await scriptedServer(t, [
    (_q, res) => {
      res.writeHead(503, { 'content-type': 'application/json', 'retry-after': '0' });
      res.end('{"statusCode":503,"code":"unavailable","message":"db down"}');
    },
    (q) => q.socket.destroy(),
    (_q, res) => {
      res.writeHead(502, { 'content-type': 'text/html' });
      res.end('<h1>Bad Gateway</h1>');
    },
    (_q, res) => {
      res.writeHead(503, { 'content-type': 'application/json', 'retry-after': '0' });
      res.end('{"statusCode":503,"code":"unavailable","message":"db down"}');
    },
    (q) => q.socket.destroy(),
    (_q, res) => sse(res, 'id: 1-0\nevent: primed\ndata:\n\nid: 1-1\ndata: 1\n\n', false),
  ]);
  const waits: number[] = [];
  const sub = new CommitfeedClient(url).subscribe('s', {
    after: '0-5',
    onReconnect: (i) => waits.push(i.delayMs),
  });
  t.teardown(() => sub.close());
  const got = collect(sub);
  t.same(
    (await got.waitFor(1, 20_000)).map((e) => e.data),
    [1],
    'served after five failures',
  );
  t.equal(waits.length, 5, 'one wait per failure');
  t.ok(
    waits.every((w) => w <= BACKOFF_MAX_MS),
    `every wait within the cap (${waits.join(', ')} ms)`,
  );
  t.same(seen, ['0-5', '0-5', '0-5', '0-5', '0-5', '0-5'], 'each attempt resumed from the cursor');
  sub.close();
});

t.test('queues: enqueue, claim, extend, nack, ack, stale leases', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const cf = new CommitfeedClient(server.url);
  const e = await cf.enqueue('mail', { to: 'a@example.com' }, { key: 'k1', maxAttempts: 2 });
  t.match(e, { id: /^\d+$/, duplicate: false });
  t.match(await cf.enqueue('mail', { to: 'a@example.com' }, { key: 'k1' }), { id: e.id, duplicate: true });
  const [job] = await cf.claim<{ to: string }>('mail', { lease: 5 });
  t.match(job, { id: e.id, payload: { to: 'a@example.com' }, attempt: 1 });
  const ext = await cf.extend('mail', job, 60);
  t.ok(Date.parse(ext.leaseExpiresAt) - Date.now() > 50_000, 'lease extended');
  const nacked = await cf.nack('mail', job, { error: 'smtp down', delay: 0 });
  t.match(nacked, { state: 'ready' });
  const stale = await cf.ack('mail', job).catch((err: unknown) => err);
  t.match(stale, { status: 409 }, 'a lease that was given up is stale');
  t.ok(stale instanceof CommitfeedError);
  const [again] = await cf.claim('mail', { wait: 5 });
  t.equal(again.attempt, 2);
  await cf.ack('mail', again);
  t.match(await cf.queueStats('mail'), { ready: 0, leased: 0 });
  t.same(await cf.claim('mail'), [], 'nothing left');
  t.match(await cf.claim('bad name').catch((err: unknown) => err), { status: 400, code: 'invalid_name' });
});

t.test('work() on a paused queue: no stream of claims; the resume brings the jobs', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const cf = new CommitfeedClient(server.url);
  const admin = (action: string) => fetch(`${server.url}/v1/queues/held/${action}`, { method: 'POST' });
  await cf.enqueue('held', 'a');
  t.equal((await admin('pause')).status, 200);
  const handled: string[] = [];
  const handler = async (job: { payload: string }) => {
    handled.push(job.payload);
  };
  // wait 0: each claim answers at once ({"jobs":[],"paused":true}); the worker must not claim again
  // at once (without the idle pause: 120 claims in these 2 s on a 2-core machine).
  const before = server.queues.counters.emptyClaims;
  const polling = cf.work<string>('held', handler, { wait: 0 });
  t.teardown(() => polling.stop());
  await sleep(2000);
  await polling.stop();
  const claims = server.queues.counters.emptyClaims - before;
  t.ok(claims >= 1 && claims <= 3, `claims in 2 s with wait 0 on a paused queue: ${claims}`);
  t.same(handled, [], 'nothing handed out while paused');

  // With a long-poll, the claim waits on the paused queue and the resume wakes it at once.
  const waiting = cf.work<string>('held', handler, { wait: 20 });
  t.teardown(() => waiting.stop());
  await until(() => server.queues.wakeups.size === 1, 5000, "the worker's claim to wait");
  const resumedAt = Date.now();
  t.equal((await admin('resume')).status, 200);
  await until(() => handled.length === 1, 5000, 'the job to be handled after the resume');
  t.ok(Date.now() - resumedAt < 2000, 'the resume woke the waiting claim');
  await waiting.stop();
  t.equal(waiting.stats.acked, 1);
});

t.test('work(): concurrency, each job acked once, failures nacked, leases extended', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const cf = new CommitfeedClient(server.url);
  const N = 40;
  await cf.enqueueBatch(
    'w',
    Array.from({ length: N }, (_, i) => ({
      payload: i,
      maxAttempts: 3,
      backoff: { type: 'fixed', delay: 0.05 },
    })),
  );
  const seen = new Map<number, number>();
  let running = 0;
  let peak = 0;
  const worker = cf.work<number>(
    'w',
    async (job) => {
      running++;
      peak = Math.max(peak, running);
      await sleep(10);
      running--;
      // Every 10th job fails on its first attempt and succeeds on the retry.
      if (job.payload % 10 === 0 && job.attempt === 1) throw new Error('first try fails');
      seen.set(job.payload, (seen.get(job.payload) ?? 0) + 1);
    },
    { concurrency: 4, wait: 1 },
  );
  t.teardown(() => worker.stop());
  const deadline = Date.now() + 20000;
  while (seen.size < N && Date.now() < deadline) await sleep(20);
  await worker.stop();
  t.equal(seen.size, N, 'every job handled');
  t.ok(
    [...seen.values()].every((c) => c === 1),
    'each succeeded exactly once',
  );
  t.equal(worker.stats.acked, N);
  t.equal(worker.stats.nacked, N / 10, 'the failures were nacked');
  t.ok(peak <= 4 && peak > 1, `concurrency bounded (peak ${peak})`);

  // A handler that outlives its lease keeps the job: the lease is extended while it runs, so a second
  // worker started meanwhile never gets it.
  await cf.enqueue('slow', 'long job');
  let started = false;
  const slow = cf.work(
    'slow',
    async () => {
      started = true;
      await sleep(2500);
    },
    { lease: 1, wait: 1 },
  );
  await until(() => started, 10000, 'the slow job to start');
  const other = cf.work('slow', async () => {}, { wait: 1 });
  t.teardown(() => Promise.all([slow.stop(), other.stop()]));
  const end = Date.now() + 8000;
  while (slow.stats.acked < 1 && Date.now() < end) await sleep(50);
  await Promise.all([slow.stop(), other.stop()]);
  t.equal(slow.stats.acked, 1, 'the slow worker acked it after 2.5 s on a 1 s lease');
  t.equal(other.stats.acked, 0, 'never redelivered meanwhile');
  t.equal(slow.stats.lost + other.stats.lost, 0, 'no lease was lost');
});
