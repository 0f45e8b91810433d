// A real browser: headless Chromium (Debian's `chromium`, driven by playwright-core) opens the live
// page, which tails a stream with the native EventSource. Events published by the test arrive; the
// server is stopped and a new one started on the same port and database; the browser reconnects by
// itself with Last-Event-ID and nothing is lost or repeated. Screenshots go to test-artifacts/.
// No Chromium is a failure, not a skip: CI installs it (.ci/run).
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { sql } from 'kysely';
import t from 'tap';
import { ARTIFACTS, launchChromium } from './chromium.ts';
import { feedRows, publish, sleep, sqlClient, startTestServer, testDatabase } from './helpers.ts';

interface TailState {
  stream: string | null;
  state: string;
  events: { id: string; type: string; data: unknown }[];
  reconnects: number;
  resumedFrom: string[];
  lastId: string | null;
}

t.test('the live page tails a stream with EventSource across a server restart', async (t) => {
  const dbUrl = await testDatabase(t);
  let server = await startTestServer(t, dbUrl);
  const port = Number(new URL(server.url).port);
  const db = sqlClient(t, dbUrl);
  const context = await launchChromium(t, { width: 1200, height: 800 });
  const page = await context.newPage();
  const consoleErrors: string[] = [];
  page.on('pageerror', (err) => consoleErrors.push(err.message));

  await publish(server.url, 'live', { data: { n: 0 } });
  await page.goto(`${server.url}/#stream=live&from=earliest`);
  const tail = () => page.evaluate(() => (window as unknown as { __tail: TailState }).__tail);
  const waitForEvents = async (n: number) => {
    const deadline = Date.now() + 20000;
    for (;;) {
      const s = await tail();
      if (s.events.length >= n) return s;
      if (Date.now() > deadline) throw new Error(`browser got ${s.events.length} events, expected ${n}`);
      await sleep(50);
    }
  };
  await waitForEvents(1);
  for (let n = 1; n <= 3; n++) await publish(server.url, 'live', { data: { n } });
  const before = await waitForEvents(4);
  t.equal(before.state, 'open');
  t.equal(before.reconnects, 0);

  // Restart: same port, same database. Two events commit while no server is running.
  await server.close();
  await sql`insert into commitfeed.feed (stream, data) values ('live', '{"n":4}'), ('live', '{"n":5}')`.execute(
    db,
  );
  await sleep(500); // the browser retries against a closed port meanwhile
  server = await startTestServer(t, dbUrl, { port });
  for (let n = 6; n <= 7; n++) await publish(server.url, 'live', { data: { n } });

  const after = await waitForEvents(8);
  await sleep(300);
  const final = await tail();
  t.same(
    final.events.map((e) => (e.data as { n: number }).n),
    [0, 1, 2, 3, 4, 5, 6, 7],
    'every event once, in commit order',
  );
  const feedIds = (await feedRows(db)).filter((r) => r.stream === 'live').map((r) => r.cursor);
  t.same(
    final.events.map((e) => e.id),
    feedIds,
    'the ids the browser saw are the feed cursors',
  );
  t.ok(after.reconnects >= 1, `the browser reconnected (${after.reconnects})`);
  t.equal(final.resumedFrom[0], before.events[3].id, 'it resumed after the last id it had (Last-Event-ID)');
  t.equal(final.state, 'open');

  // The stream list shows the stream (it refreshes every 2 s).
  await page.waitForSelector('#streams tr.stream >> text=live', { timeout: 10000 });
  t.match(await page.textContent('#status'), /reconnects · last id/);
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: path.join(ARTIFACTS, 'live-page.png'), fullPage: true });
  t.same(consoleErrors, [], 'no script errors on the page');
});

t.test(
  "EventSource on several streams sees each event's stream in lastEventId, across a restart",
  async (t) => {
    const dbUrl = await testDatabase(t);
    let server = await startTestServer(t, dbUrl);
    const port = Number(new URL(server.url).port);
    const db = sqlClient(t, dbUrl);
    const context = await launchChromium(t, { width: 1200, height: 800 });
    const page = await context.newPage();
    const consoleErrors: string[] = [];
    page.on('pageerror', (err) => consoleErrors.push(err.message));
    await page.goto(`${server.url}/healthz`);

    await publish(server.url, 'alpha', { data: { n: 0 } });
    await publish(server.url, 'beta', { data: { n: 1 }, type: 'created' });
    // Plain EventSource, as an application would write it: the stream comes from lastEventId alone.
    await page.evaluate(() => {
      type Got = { stream: string; type: string; n: number; id: string };
      const w = window as unknown as { __got: Got[]; __opens: number; __es: EventSource };
      w.__got = [];
      w.__opens = 0;
      const es = new EventSource('/v1/events?stream=alpha&stream=beta&from=earliest');
      w.__es = es;
      const onEvent = (e: MessageEvent) => {
        const [, stream] = e.lastEventId.split('/');
        w.__got.push({ stream, type: e.type, n: JSON.parse(e.data).n, id: e.lastEventId });
      };
      es.addEventListener('message', onEvent);
      es.addEventListener('created', onEvent);
      es.addEventListener('open', () => w.__opens++);
    });
    type Got = { stream: string; type: string; n: number; id: string };
    const got = () => page.evaluate(() => (window as unknown as { __got: Got[] }).__got);
    const waitFor = async (n: number) => {
      const deadline = Date.now() + 20000;
      for (;;) {
        const g = await got();
        if (g.length >= n) return g;
        if (Date.now() > deadline) throw new Error(`browser got ${g.length} events, expected ${n}`);
        await sleep(50);
      }
    };
    await waitFor(2);
    await publish(server.url, 'beta', { data: { n: 2 } });
    await publish(server.url, 'alpha', { data: { n: 3 }, type: 'created' });
    await waitFor(4);

    // Restart: the browser resumes by itself, sending the last id (which names a stream) back.
    await server.close();
    await sql`insert into commitfeed.feed (stream, data) values ('beta', '{"n":4}'), ('alpha', '{"n":5}')`.execute(
      db,
    );
    await sleep(500);
    server = await startTestServer(t, dbUrl, { port });
    await publish(server.url, 'beta', { data: { n: 6 } });
    await waitFor(7);
    await sleep(300);
    const final = await got();
    t.same(
      final.map((e) => [e.n, e.stream, e.type]),
      [
        [0, 'alpha', 'message'],
        [1, 'beta', 'created'],
        [2, 'beta', 'message'],
        [3, 'alpha', 'created'],
        [4, 'beta', 'message'],
        [5, 'alpha', 'message'],
        [6, 'beta', 'message'],
      ],
      'every event once, in commit order, each with its stream',
    );
    const rows = (await feedRows(db)).map((r) => `${r.cursor}/${r.stream}`);
    t.same(
      final.map((e) => e.id),
      rows,
      'lastEventId is <cursor>/<stream>',
    );
    t.ok(
      (await page.evaluate(() => (window as unknown as { __opens: number }).__opens)) >= 2,
      'the browser reconnected',
    );
    t.equal(
      await page.evaluate(() => (window as unknown as { __es: EventSource }).__es.readyState),
      1,
      'still open (the resume with a stream-naming id was accepted)',
    );
    await page.evaluate(() => (window as unknown as { __es: EventSource }).__es.close());
    t.same(consoleErrors, [], 'no script errors on the page');
  },
);

t.test(
  'priming in a browser: no message, lastEventId set, resume after a drop before any event',
  async (t) => {
    const dbUrl = await testDatabase(t);
    let server = await startTestServer(t, dbUrl);
    const port = Number(new URL(server.url).port);
    const db = sqlClient(t, dbUrl);
    const context = await launchChromium(t, { width: 1200, height: 800 });
    const page = await context.newPage();
    await page.goto(`${server.url}/healthz`);
    await publish(server.url, 'pb', { data: { n: 0 } });
    type W = { __msgs: { id: string; data: string }[]; __primed: string[] };
    await page.evaluate(() => {
      const w = window as unknown as W;
      w.__msgs = [];
      w.__primed = [];
      const es = new EventSource('/v1/streams/pb/events');
      es.onmessage = (e) => w.__msgs.push({ id: e.lastEventId, data: e.data });
      es.addEventListener('primed', (e) => w.__primed.push((e as MessageEvent).lastEventId));
    });
    const read = () =>
      page.evaluate(() => {
        const w = window as unknown as W;
        return { msgs: w.__msgs, primed: w.__primed };
      });
    const waitUntil = async (cond: (s: Awaited<ReturnType<typeof read>>) => boolean, what: string) => {
      const deadline = Date.now() + 20000;
      for (;;) {
        const s = await read();
        if (cond(s)) return s;
        if (Date.now() > deadline) throw new Error(`browser: timed out waiting for ${what}`);
        await sleep(50);
      }
    };
    const first = await waitUntil((s) => s.primed.length >= 1, 'the priming frame');
    t.match(
      first.primed[0],
      /^\d+-\d+\.[0-9a-f]{8}$/,
      'the priming frame sets lastEventId to the connect point',
    );
    t.same(first.msgs, [], 'onmessage does not see the priming frame');

    await server.close();
    await sql`insert into commitfeed.feed (stream, data) values ('pb', '{"n":1}')`.execute(db);
    server = await startTestServer(t, dbUrl, { port });
    const after = await waitUntil((s) => s.msgs.length >= 1, 'the event committed while away');
    await sleep(300);
    const final = await read();
    const [row] = (await feedRows(db)).filter((r) => r.stream === 'pb').slice(-1);
    t.same(final.msgs, [{ id: row.cursor, data: '{"n":1}' }], 'only the event committed while away');
    t.ok(after.primed.length >= 2, 'primed again on reconnect');
  },
);

t.test('the docs page renders the API in a browser', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const context = await launchChromium(t, { width: 1200, height: 800 });
  const page = await context.newPage();
  await page.goto(`${server.url}/docs`);
  await page.waitForSelector('.opblock-summary-path', { timeout: 20000 });
  const paths = await page.$$eval('.opblock-summary-path', (els) => els.map((e) => e.textContent?.trim()));
  t.ok(paths.includes('/v1/streams/{stream}/events'), 'the streams API is listed');
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: path.join(ARTIFACTS, 'docs-page.png') });
});
