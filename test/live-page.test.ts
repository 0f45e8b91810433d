// The live page and its one data source, GET /v1/ops/live: open pages cost the database nothing
// beyond the sampler's once-a-second reads; each connection sees only what its token may; and a real
// Chromium shows publishes, a horizon stall (held transaction), a slow subscriber and a dead-lettered
// job, at desktop and phone widths. Screenshots go to test-artifacts/; with UPDATE_README_SCREENSHOT=1
// the desktop one is also written to docs/live-page.png (the README's).
// No Chromium is a failure, not a skip: CI installs it (.ci/run).
import { mkdirSync, statSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { sql } from 'kysely';
import type pg from 'pg';
import t from 'tap';
import { ARTIFACTS, launchChromium } from './chromium.ts';
import { mintToken } from '../src/auth/tokens.ts';
import { parseSse, textChunks } from '../src/client/sse.ts';
import type { Sample } from '../src/ops/sampler.ts';
import type { StreamRow } from '../src/ops/stream-activity.ts';
import { pgClient, publish, sleep, sqlClient, startTestServer, testDatabase, until } from './helpers.ts';
import { api, claim, enqueue, nack } from './queue-helpers.ts';

const README_SHOT = path.resolve('docs/live-page.png');
const SECRET = 'live-page-secret-0123456789-0123456789-abc';
interface History {
  intervalMs: number;
  admin: boolean;
  global: boolean;
  samples: Partial<Sample>[];
  streams: StreamRow[];
}
interface Tick {
  sample: Partial<Sample>;
  streams: StreamRow[];
}

/** A live-endpoint connection: its history frame, then every sample frame as it arrives. */
async function openLive(
  t: { teardown(fn: () => unknown): void },
  url: string,
  headers: Record<string, string> = {},
) {
  const abort = new AbortController();
  t.teardown(() => abort.abort());
  const res = await fetch(`${url}/v1/ops/live`, { headers, signal: abort.signal });
  const frames: { event: string; body: unknown }[] = [];
  if (res.status === 200 && res.body) {
    const body = res.body;
    void (async () => {
      try {
        for await (const m of parseSse(textChunks(body))) {
          if (m.data !== undefined) frames.push({ event: m.event ?? 'message', body: JSON.parse(m.data) });
        }
      } catch {
        // aborted
      }
    })();
  }
  return {
    status: res.status,
    frames,
    history: () => frames.find((f) => f.event === 'history')?.body as History | undefined,
    ticks: () => frames.filter((f) => f.event === 'sample').map((f) => f.body as Tick),
    close: () => abort.abort(),
  };
}

/** Transactions committed and rolled back in the database so far (every statement runs in one). */
async function transactions(db: ReturnType<typeof sqlClient>): Promise<number> {
  await sql`select pg_stat_clear_snapshot()`.execute(db);
  const { rows } = await sql<{ n: string }>`
    select (xact_commit + xact_rollback)::text as n from pg_stat_database where datname = current_database()`.execute(
    db,
  );
  return Number(rows[0].n);
}

t.test('open live pages add no database queries: one sampler read per tick, however many', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl);
  const db = sqlClient(t, dbUrl);
  await publish(server.url, 'orders', { data: { n: 1 } });
  const sampler = server.sampler;

  const one = await openLive(t, server.url);
  t.equal(one.status, 200);
  await until(() => one.ticks().length >= 1, 10000, 'a first sample');

  /** Sampler statements and database transactions per tick over `ticks` ticks. */
  const measure = async (ticks: number) => {
    const q0 = sampler.stats.queries;
    const k0 = sampler.stats.ticks;
    const x0 = await transactions(db);
    await until(() => sampler.stats.ticks >= k0 + ticks, ticks * 3000, `${ticks} ticks`);
    // Backends report their counts at most once a second: let the last ones land.
    await sleep(1500);
    const x1 = await transactions(db);
    const k = sampler.stats.ticks - k0;
    return { queries: (sampler.stats.queries - q0) / k, xacts: (x1 - x0) / k, ticks: k };
  };
  // Two windows with one page: how much the count moves by itself (stats reach the view late).
  const a = await measure(4);
  const b = await measure(4);
  const with1 = a.xacts >= b.xacts ? a : b;

  const pages = await Promise.all(Array.from({ length: 25 }, () => openLive(t, server.url)));
  t.ok(
    pages.every((p) => p.status === 200),
    '25 more pages open',
  );
  await until(() => pages.every((p) => p.ticks().length >= 1), 10000, 'every page gets samples');
  const with26 = await measure(4);
  t.comment(
    `1 page: ${with1.queries} sampler statements and ${a.xacts.toFixed(1)}, ${b.xacts.toFixed(1)} transactions per tick; ` +
      `26 pages: ${with26.queries} and ${with26.xacts.toFixed(1)}`,
  );
  t.equal(with1.queries, 2, 'the sampler reads twice per tick (queue depth, feed head) when nothing stalls');
  t.equal(with26.queries, with1.queries, 'the same with 26 pages open');
  // If each page cost one query per tick, 25 more pages would add 25 transactions per tick.
  t.ok(
    with26.xacts <= with1.xacts + 5,
    `database transactions per tick do not grow with pages (${with1.xacts.toFixed(1)} → ${with26.xacts.toFixed(1)})`,
  );

  const head = await fetch(`${server.url}/v1/ops/live`, {
    method: 'HEAD',
    signal: AbortSignal.timeout(5000),
  });
  t.equal(head.status, 200, 'HEAD answers at once');
  t.match(head.headers.get('content-type'), /text\/event-stream/);

  const h = pages[0].history()!;
  t.ok(h.samples.length >= 1, 'a new page gets the ring as history');
  t.equal(h.intervalMs, 1000);
  const last = pages[0].ticks().at(-1)!;
  t.same(
    last.streams.map((s) => s.name),
    ['orders'],
    'the streams view lists user streams',
  );
  t.type(last.sample.publishes, 'number');
});

t.test('rates are per second over the last tick and per-stream rates over a sliding window', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl);
  const live = await openLive(t, server.url);
  await until(() => live.ticks().length >= 1, 10000, 'a first sample');
  // A burst of 30 events in one request, then quiet: the rate shows the burst, then falls to 0.
  await publish(
    server.url,
    'burst',
    Array.from({ length: 30 }, (_, n) => ({ data: { n } })),
  );
  await until(
    () => live.ticks().some((x) => (x.sample.eventsWritten ?? 0) >= 20),
    10000,
    'the burst in a sample',
  );
  const burst = live.ticks().find((x) => (x.sample.eventsWritten ?? 0) >= 20)!;
  t.ok(burst.sample.eventsWritten! <= 31, `events written per second: ${burst.sample.eventsWritten}`);
  t.equal(burst.sample.batch, 30, 'one commit of 30 events');
  await until(
    () => live.ticks().some((x) => x.streams.some((s) => s.name === 'burst' && s.lastMinute === 30)),
    10000,
    'the stream row counts the burst',
  );
  const row = live
    .ticks()
    .flatMap((x) => x.streams)
    .find((s) => s.name === 'burst' && s.lastMinute === 30)!;
  t.equal(row.perS, 3, '30 events over the 10 s window: 3/s');
  t.ok(Date.now() - row.lastAt! < 30_000, 'last event time is recent');
  const n = live.ticks().length;
  await until(() => live.ticks().length >= n + 2, 10000, 'two more samples');
  t.equal(live.ticks().at(-1)!.sample.eventsWritten, 0, 'a quiet second reads 0/s, not an average');
});

t.test('with access control on, each connection sees only what its token may', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { jwtSecret: SECRET });
  const admin = await mintToken({
    secret: SECRET,
    scopes: { publish: ['*'], subscribe: ['*'], enqueue: ['*'], work: ['*'], admin: true },
    ttl: '1h',
  });
  const narrow = await mintToken({
    secret: SECRET,
    scopes: { subscribe: ['orders*'], work: ['mail'] },
    ttl: '1h',
  });
  const auth = (tok: string) => ({ authorization: `Bearer ${tok}` });
  for (const s of ['orders', 'payments']) {
    const r = await fetch(`${server.url}/v1/streams/${s}/events`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...auth(admin) },
      body: JSON.stringify({ data: 1 }),
    });
    t.equal(r.status, 201);
  }
  for (const q of ['mail', 'billing']) {
    const r = await fetch(`${server.url}/v1/queues/${q}/jobs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...auth(admin) },
      body: JSON.stringify({ payload: 1 }),
    });
    t.equal(r.status, 201);
  }
  t.equal((await openLive(t, server.url)).status, 401, 'no token: 401');
  const full = await openLive(t, server.url, auth(admin));
  const part = await openLive(t, server.url, auth(narrow));
  await until(
    () => [full, part].every((l) => l.ticks().some((x) => (x.sample.queues?.length ?? 0) > 0)),
    10000,
    'samples with queues',
  );
  await until(() => full.ticks().at(-1)!.streams.length === 2, 10000, 'both streams sampled');
  const f = full.ticks().at(-1)!;
  const p = part.ticks().at(-1)!;
  t.same(
    f.streams.map((s) => s.name).sort(),
    ['orders', 'payments'],
    'admin: every user stream (internal queue streams hidden)',
  );
  t.same(
    f.sample.queues!.map((q) => q.name),
    ['billing', 'mail'],
  );
  t.same(
    p.streams.map((s) => s.name),
    ['orders'],
    'a narrow token: only the streams it may subscribe to',
  );
  t.same(
    p.sample.queues!.map((q) => q.name),
    ['mail'],
    'and only the queues it may work on',
  );
  t.equal(full.history()!.admin, true);
  t.equal(part.history()!.admin, false);
});

interface PageLive {
  state: string;
  samples: number;
  last: Sample | null;
  admin: boolean;
  streams: StreamRow[];
  kept: Sample[];
}

t.test('the live page shows traffic, a stall, a slow subscriber and a dead letter', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { slowSubscriberMaxMs: 1500 });
  const base = server.url;
  const context = await launchChromium(t);
  const page = await context.newPage();
  const errors: string[] = [];
  page.on('pageerror', (err) => errors.push(err.message));
  const state = () => page.evaluate(() => (window as unknown as { __live: PageLive }).__live);

  // Traffic: publishes to two streams, a few a second, for the whole test.
  let publishing = true;
  let published = 0;
  const traffic = (async () => {
    while (publishing) {
      await publish(base, 'orders', { data: { n: published++ }, type: 'created' });
      if (published % 3 === 0) await publish(base, 'payments', { data: { n: published } });
      await sleep(60);
    }
  })();
  t.teardown(async () => {
    publishing = false;
    await traffic;
  });

  // A queue with a dead letter: one attempt, nacked with an error.
  t.equal((await enqueue(base, 'emails', { payload: { to: 'a@example.com' }, maxAttempts: 1 })).status, 201);
  const [job] = await claim(base, 'emails', { max: 1 });
  t.equal(
    (await nack(base, 'emails', job.id, { lease: job.lease, error: 'smtp: connection refused' })).status,
    200,
  );
  t.equal((await enqueue(base, 'emails', { payload: { to: 'b@example.com' } })).status, 201);

  await page.goto(base);
  await until(async () => (await state()).samples >= 3, 15000, 'the page to receive samples');
  await until(
    async () => (await state()).streams.some((s) => s.name === 'orders' && s.perS > 0),
    15000,
    'orders with a rate',
  );

  // Streams view: user streams with real rates and relative ages; the internal queue stream hidden.
  // (On a loaded machine the traffic loop may not have reached its first `payments` yet.)
  await until(
    async () => /payments/.test((await page.textContent('#streams')) ?? ''),
    15000,
    'payments in the streams view',
  );
  const streamsText = await page.textContent('#streams');
  t.match(streamsText, /orders/);
  t.match(streamsText, /payments/);
  t.notMatch(streamsText, /queue\//, 'internal streams are hidden');
  t.match(streamsText, /just now|\d+ s ago/, 'last event as a relative age');

  // Charts: canvases drawn, and the throughput series shows the publishes.
  t.ok((await page.locator('.chart canvas').count()) >= 8, 'the charts are drawn');
  // The traffic loop publishes several a second when the machine lets it; a sample of over one a
  // second must reach the chart (waited for: a loaded machine slows the loop, not the chart).
  const maxRate = async () => Math.max(...(await state()).kept.map((s) => s.publishes));
  await until(async () => (await maxRate()) > 1, 15000, 'a sample of over one publish a second');
  t.ok((await maxRate()) > 1, `publishes/s charted (max ${(await maxRate()).toFixed(1)})`);
  t.match(await page.textContent('#cards'), /publishes[\d,.]+\/s/, 'the publish rate in a card');

  // A horizon stall: a writing transaction held open while events are published behind it.
  const holder: pg.Client = await pgClient(t, dbUrl);
  await holder.query(`set application_name = 'held-by-test'`);
  await holder.query('begin');
  await holder.query('select pg_current_xact_id()');
  const { rows } = await holder.query<{ pid: number }>('select pg_backend_pid() as pid');
  await page.waitForFunction(
    () => /stalled/.test(document.getElementById('horizon-card')?.textContent ?? ''),
    undefined,
    { timeout: 15000 },
  );
  await until(
    async () => (await page.textContent('#horizon-card'))!.includes('held-by-test'),
    10000,
    'the blocker named',
  );
  const horizonText = await page.textContent('#horizon-card');
  t.match(horizonText, new RegExp(`pid ${rows[0].pid}`), 'the blocking backend pid is shown');
  t.match(horizonText, /held-by-test/, 'with its application_name');
  await until(
    async () => (await state()).kept.some((s) => (s.behindRows ?? 0) > 0 && (s.behindAgeS ?? 0) > 0),
    10000,
    'the tailer shown behind the head',
  );
  await until(async () => (await state()).kept.some((s) => s.stallS >= 2), 15000, 'a stall of 2 s charted');
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: path.join(ARTIFACTS, 'live-page-stall.png'), fullPage: true });
  if (process.env.UPDATE_README_SCREENSHOT === '1') {
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: README_SHOT, clip: { x: 0, y: 0, width: 1280, height: 900 } });
    t.comment(`README screenshot: ${statSync(README_SHOT).size} bytes`);
  }
  await holder.query('commit');
  await until(
    async () => /moving/.test((await page.textContent('#horizon-card')) ?? ''),
    15000,
    'stall over',
  );
  const stalls = (await state()).kept.map((s) => s.stallS ?? 0);
  t.ok(Math.max(...stalls) >= 2, `the stall is charted (${Math.max(...stalls).toFixed(1)} s)`);
  t.equal(stalls.at(-1), 0, 'and back to 0 once the transaction ends');

  // A slow subscriber: a raw socket that subscribes to a stream of large events and never reads.
  const sock = net.connect(Number(new URL(base).port), '127.0.0.1');
  t.teardown(() => sock.destroy());
  sock.pause();
  sock.write('GET /v1/streams/bulk/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n');
  await until(async () => (await state()).last!.sseConnections >= 1, 10000, 'the slow subscriber connected');
  const big = 'x'.repeat(200_000);
  for (let i = 0; i < 40; i++) await publish(base, 'bulk', { data: { big, i } });
  await until(
    async () => (await state()).kept.some((s) => s.sseBufferedBytes > 100_000 || s.slowDropped > 0),
    15000,
    'the slow subscriber visible',
  );
  await until(
    async () => (await state()).kept.some((s) => s.slowDropped > 0),
    15000,
    'the slow subscriber dropped after SLOW_SUBSCRIBER_TIMEOUT',
  );
  const maxBuffered = Math.max(...(await state()).kept.map((s) => s.sseBufferedBytes));
  t.ok(maxBuffered > 100_000, `bytes waiting in its socket charted (${maxBuffered})`);

  // Queues view: depth, the dead letter with its last error, redrive and pause.
  await until(async () => /emails/.test((await page.textContent('#queues')) ?? ''), 10000, 'the queue row');
  const queueRow = page.locator('#queues tr[data-queue="emails"]');
  t.match(await queueRow.textContent(), /running/);
  await queueRow.getByRole('button', { name: /Dead letters \(1\)/ }).click();
  await page.waitForSelector('#queues tr.dead-job', { timeout: 10000 });
  t.match(
    await page.textContent('#queues tr.dead-job'),
    /smtp: connection refused/,
    'the last error is shown',
  );
  t.match(await page.textContent('#queues-section'), /Job inspector: not available/);
  await page.screenshot({ path: path.join(ARTIFACTS, 'live-page-desktop.png'), fullPage: true });
  await page.locator('#queues tr.dead-job').getByRole('button', { name: 'Redrive' }).click();
  await until(
    async () => (await api(base, 'GET', '/v1/queues/emails')).body.dead === 0,
    10000,
    'the dead job redriven',
  );
  t.equal((await api(base, 'GET', '/v1/queues/emails')).body.ready, 2, 'both jobs ready again');
  await until(
    async () => /\b2\b/.test((await queueRow.locator('td').nth(2).textContent()) ?? ''),
    10000,
    'the page shows 2 ready',
  );
  await queueRow.getByRole('button', { name: 'Pause' }).click();
  await until(async () => /paused/.test((await queueRow.textContent()) ?? ''), 10000, 'paused shown');
  t.equal((await api(base, 'GET', '/v1/queues/emails')).body.paused, true, 'the queue is paused');
  const kept = (await state()).kept;
  t.ok(
    kept.some((s) => s.queues?.some((q) => q.name === 'emails' && q.ready === 2 && q.oldestReadyS > 0)),
    'queue depth and oldest-ready age are sampled over time',
  );
  t.ok(
    kept.some((s) => s.queues?.some((q) => q.claimed > 0)),
    'claims per second sampled',
  );

  // Tail: click a stream, see events with id, type and data; pause and resume without loss.
  await page.click('#streams tr[data-stream="orders"]');
  const tail = () =>
    page.evaluate(
      () =>
        (
          window as unknown as {
            __tail: { state: string; events: { id: string; type: string; data: { n: number } }[] };
          }
        ).__tail,
    );
  // On a timeout, what the tail panel holds and how far the traffic got say which side stopped.
  const tailed = (n: number, what: string) =>
    until(async () => (await tail()).events.length >= n, 20000, what).catch(async (err) => {
      const { events, ...rest } = await tail();
      throw new Error(`${err.message}: ${JSON.stringify({ ...rest, events: events.length, published })}`);
    });
  await tailed(3, 'tailed events');
  t.match(await page.textContent('#log'), /created/, 'the event type is shown');
  await page.click('#pause');
  t.equal((await tail()).state, 'paused');
  const before = (await tail()).events.length;
  await sleep(500);
  await page.click('#pause');
  await tailed(before + 5, 'events after resume');
  const ns = (await tail()).events.map((e) => e.data.n);
  t.same(
    ns,
    ns.map((_, i) => ns[0] + i),
    'nothing missed or repeated across the pause',
  );

  // Phone width: one column, still readable.
  await page.setViewportSize({ width: 390, height: 844 });
  await sleep(1200);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  t.ok(overflow <= 1, `no sideways scrolling on a phone (overflow ${overflow}px)`);
  await page.screenshot({ path: path.join(ARTIFACTS, 'live-page-phone.png'), fullPage: true });
  t.same(errors, [], 'no script errors on the page');
});

t.test('with access control on, the page asks for a token and never puts it in a URL', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { jwtSecret: SECRET });
  const admin = await mintToken({
    secret: SECRET,
    scopes: { publish: ['*'], subscribe: ['*'], admin: true },
    ttl: '1h',
  });
  const narrow = await mintToken({ secret: SECRET, scopes: { subscribe: ['orders'] }, ttl: '1h' });
  for (const s of ['orders', 'secret-stream']) {
    await fetch(`${server.url}/v1/streams/${s}/events`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${admin}` },
      body: JSON.stringify({ data: 1 }),
    });
  }
  const context = await launchChromium(t);
  const page = await context.newPage();
  const urls: string[] = [];
  page.on('request', (r) => urls.push(r.url()));
  await page.goto(server.url);
  await page.waitForSelector('#token-panel:not([hidden])', { timeout: 15000 });
  await page.fill('#token', narrow);
  await page.click('#token-form button[type=submit]');
  await until(
    async () => /orders/.test((await page.textContent('#streams')) ?? ''),
    15000,
    'the permitted stream listed',
  );
  await sleep(1500);
  t.notMatch(
    await page.textContent('#streams'),
    /secret-stream/,
    'a stream the token may not read is not listed',
  );
  t.equal(
    await page.locator('#horizon-card').count(),
    1,
    'service-wide series shown (METRICS_REQUIRE_ADMIN off)',
  );
  await page.click('#streams tr[data-stream="orders"]');
  await until(
    async () =>
      (await page.evaluate(() => (window as unknown as { __tail: { state: string } }).__tail.state)) ===
      'open',
    10000,
    'the tail open with the cookie',
  );
  t.notOk(
    urls.some((u) => u.includes(narrow) || /access_token/i.test(u)),
    'the token never appears in a request URL',
  );
  t.ok(urls.some((u) => u.endsWith('/v1/ops/live')));
});
