// A real browser: headless Chromium (Debian's `chromium`, driven by playwright-core) opens the live
// page, which tails a stream with the native EventSource. Events published by the test arrive; the
// server is stopped and a new one started on the same port and database; the browser reconnects by
// itself with Last-Event-ID and nothing is lost or repeated. Screenshots go to test-artifacts/.
// No Chromium is a failure, not a skip: CI installs it (.ci/run).
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { chromium } from 'playwright-core';
import t from 'tap';
import { feedRows, publish, sleep, sqlClient, startTestServer, testDatabase } from './helpers.ts';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const ARTIFACTS = path.resolve('test-artifacts');
const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

interface TailState {
  stream: string | null;
  state: string;
  events: { id: string; type: string; data: unknown }[];
  reconnects: number;
  resumedFrom: string[];
  lastId: string | null;
}

async function launch(t: { teardown(fn: () => unknown): void }) {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `Chromium not found at ${CHROMIUM}: install it (apt-get install -y chromium; .ci/run does) or set CHROMIUM_PATH`,
    );
  }
  const userDataDir = mkdtempSync(path.join(os.tmpdir(), 'commitfeed-chromium-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: FLAGS,
    viewport: { width: 1200, height: 800 },
  });
  t.teardown(async () => {
    await context.close().catch(() => {});
    rmSync(userDataDir, { recursive: true, force: true });
  });
  return context;
}

t.test('the live page tails a stream with EventSource across a server restart', async (t) => {
  const dbUrl = await testDatabase(t);
  let server = await startTestServer(t, dbUrl);
  const port = Number(new URL(server.url).port);
  const db = sqlClient(t, dbUrl);
  const context = await launch(t);
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

t.test('the docs page renders the API in a browser', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const context = await launch(t);
  const page = await context.newPage();
  await page.goto(`${server.url}/docs`);
  await page.waitForSelector('.opblock-summary-path', { timeout: 20000 });
  const paths = await page.$$eval('.opblock-summary-path', (els) => els.map((e) => e.textContent?.trim()));
  t.ok(paths.includes('/v1/streams/{stream}/events'), 'the streams API is listed');
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: path.join(ARTIFACTS, 'docs-page.png') });
});
