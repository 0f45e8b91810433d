// Cacheable history: a full JSON page after a cursor in the URL is immutable (strong ETag, long
// max-age, 304 on revalidation without a read); everything that touches the tail, the trim mark or a
// token stays out of shared caches. Then a real nginx proxy_cache in front: many clients catching up
// over the same range reach the service (and so the database) about once per page.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { mintToken } from '../src/auth/tokens.ts';
import { sql } from 'kysely';
import { parseCursor } from '../src/feed/cursor.ts';
import { freePort, publish, sqlClient, startTestServer, testDatabase, until } from './helpers.ts';

const SECRET = 'test-secret-0123456789-0123456789-abcdef';
const NGINX = '/usr/sbin/nginx';

/** A marker event on another stream (its id is a cursor before everything that follows), then `n`
 * events on `stream` in one batch. */
async function seed(base: string, stream: string, n: number): Promise<string> {
  const marker = await publish(base, `${stream}-marker`, { data: 0 });
  const batch = Array.from({ length: n }, (_, i) => ({ data: { i } }));
  for (let i = 0; i < n; i += 1000) {
    const r = await publish(base, stream, batch.slice(i, i + 1000));
    if (r.status !== 201) throw new Error(`seed publish failed: ${r.status}`);
  }
  return marker.body.id;
}

t.test('cache headers: full pages immutable, the rest no-store', async (t) => {
  const server = await startTestServer(t, await testDatabase(t), { windowEvents: 100 });
  const u = server.url;
  const after = await seed(u, 'h', 25);
  const page = (q: string, headers: Record<string, string> = {}) =>
    fetch(`${u}/v1/streams/h/events?${q}`, { headers });

  const full = await page(`after=${after}&limit=10`);
  t.equal(full.status, 200);
  const etag = full.headers.get('etag');
  t.match(etag, /^"[A-Za-z0-9_-]+"$/, 'a strong ETag');
  t.equal(
    full.headers.get('cache-control'),
    'public, max-age=604800, immutable',
    'RETENTION (7d) caps max-age',
  );
  t.equal(full.headers.get('vary'), 'accept, last-event-id');
  const body = (await full.json()) as { events: { id: string }[]; next: string };
  t.equal(body.events.length, 10);

  const again = await page(`after=${after}&limit=10`);
  t.equal(again.headers.get('etag'), etag, 'the same page, the same ETag');
  t.same(await again.json(), body, 'and the same body');

  const revalidated = await page(`after=${after}&limit=10`, { 'if-none-match': etag! });
  t.equal(revalidated.status, 304);
  t.equal(revalidated.headers.get('etag'), etag);
  t.equal(revalidated.headers.get('cache-control'), 'public, max-age=604800, immutable');
  t.equal(await revalidated.text(), '', '304 has no body');
  t.equal(
    (await page(`after=${after}&limit=10`, { 'if-none-match': `"other", ${etag}` })).status,
    304,
    'a list of ETags matches too',
  );
  t.equal((await page(`after=${after}&limit=10`, { 'if-none-match': '"other"' })).status, 200);

  // The same range read through the window and from the table: same bytes, same ETag (the window
  // holds 100 events; push these 25 out of it and read again).
  await seed(u, 'other', 150);
  const fromTable = await page(`after=${after}&limit=10`);
  t.equal(fromTable.headers.get('etag'), etag);
  t.same(await fromTable.json(), body, 'a table read gives the same page');

  const short = await page(`after=${body.next}&limit=100`);
  t.equal(
    ((await short.json()) as { events: unknown[] }).events.length,
    15,
    'the page that reaches the tail',
  );
  t.equal(short.headers.get('cache-control'), 'no-store', 'touches the tail: no-store');
  t.equal(short.headers.get('etag'), null);
  t.equal(
    (await page(`after=${body.next}&limit=100`, { 'if-none-match': '*' })).status,
    200,
    'a short page is never revalidated: it is read',
  );

  const earliest = await page('from=earliest&limit=10');
  t.equal(earliest.headers.get('cache-control'), 'no-store', 'from=earliest moves with retention');
  const latest = await page('limit=10');
  t.equal(latest.headers.get('cache-control'), 'no-store', 'latest moves with the tail');
  const byHeader = await page('limit=10', { 'last-event-id': after });
  t.equal(((await byHeader.json()) as { events: unknown[] }).events.length, 10);
  t.equal(byHeader.headers.get('cache-control'), 'no-store', 'a Last-Event-ID cursor is not cached');

  const waited = page(`after=${body.events[9].id}&limit=100&wait=5`);
  const tail = ((await (await page(`after=${body.next}&limit=100`)).json()) as { next: string }).next;
  const waitedFrom = page(`after=${tail}&limit=1&wait=5`);
  await publish(u, 'h', { data: 'late' });
  const lp = await waitedFrom;
  t.equal(((await lp.json()) as { events: unknown[] }).events.length, 1, 'the long-poll got the new event');
  t.equal(lp.headers.get('cache-control'), 'no-store', 'a long-poll is not cached even when it fills');
  t.equal((await waited).headers.get('cache-control'), 'no-store');

  const multi = await fetch(`${u}/v1/events?stream=h&stream=h-marker&after=${after}&limit=5`);
  t.match(multi.headers.get('cache-control'), /^public, .*immutable$/, 'GET /v1/events pages too');
  t.not(multi.headers.get('etag'), etag, 'another page, another ETag');

  // Retention passed the cursor: a revalidation is not a 304 but the read, which says `reset`.
  const { txid, id } = parseCursor(body.events[4].id)!;
  await sql`update commitfeed.trim_mark set txid = ${String(txid)}::xid8, id = ${id}::int8`.execute(
    sqlClient(t, server.databaseUrl),
  );
  const trimmed = await page(`after=${after}&limit=10`, { 'if-none-match': etag! });
  t.equal(trimmed.status, 200, 'a trimmed cursor is not revalidated');
  t.equal(((await trimmed.json()) as { reset?: unknown }).reset !== undefined, true, 'it gets its reset');
  t.equal(trimmed.headers.get('cache-control'), 'no-store');

  const sse = await fetch(`${u}/v1/streams/h/events?after=${after}`, {
    headers: { accept: 'text/event-stream' },
  });
  t.notMatch(sse.headers.get('cache-control'), /public|max-age/, 'SSE is never cacheable');
  await sse.body?.cancel();
});

t.test('with tokens: private, and Vary names the credentials', async (t) => {
  const server = await startTestServer(t, await testDatabase(t), {
    jwtSecret: SECRET,
    corsOrigins: ['https://app.example'],
  });
  const u = server.url;
  const all = await mintToken({ secret: SECRET, scopes: { publish: ['*'], subscribe: ['*'] }, ttl: '1h' });
  const other = await mintToken({ secret: SECRET, scopes: { subscribe: ['x'] }, ttl: '1h' });
  const auth = { authorization: `Bearer ${all}`, 'content-type': 'application/json' };
  const marker = await fetch(`${u}/v1/streams/p-marker/events`, {
    method: 'POST',
    headers: auth,
    body: '{"data":0}',
  });
  const after = ((await marker.json()) as { id: string }).id;
  await fetch(`${u}/v1/streams/p/events`, { method: 'POST', headers: auth, body: '[{"data":1},{"data":2}]' });

  const res = await fetch(`${u}/v1/streams/p/events?after=${after}&limit=2`, {
    headers: { ...auth, origin: 'https://app.example' },
  });
  t.equal(res.status, 200);
  t.equal(res.headers.get('cache-control'), 'private, max-age=604800, immutable');
  t.equal(
    res.headers.get('vary'),
    'Origin, accept, last-event-id, authorization, cookie',
    "CORS's Origin is kept beside ours",
  );
  const etag = res.headers.get('etag')!;
  const denied = await fetch(`${u}/v1/streams/p/events?after=${after}&limit=2`, {
    headers: { authorization: `Bearer ${other}`, 'if-none-match': etag },
  });
  t.equal(denied.status, 403, 'a revalidation is authorized like a read: no 304 for another token');
  const anonymous = await fetch(`${u}/v1/streams/p/events?after=${after}&limit=2`, {
    headers: { 'if-none-match': etag },
  });
  t.equal(anonymous.status, 401);
});

/** nginx with proxy_cache in front of `upstream`, as a child process stopped at teardown. */
async function startNginx(
  t: { teardown(fn: () => unknown): void },
  upstream: string,
): Promise<{ url: string; misses(): Promise<string[]> }> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'commitfeed-nginx-'));
  const port = await freePort();
  const log = path.join(dir, 'access.log');
  writeFileSync(
    path.join(dir, 'nginx.conf'),
    `daemon off;
master_process off;
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 256; }
http {
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  log_format cache '$upstream_cache_status $request_uri';
  access_log ${log} cache;
  proxy_cache_path ${dir}/cache levels=1:2 keys_zone=history:1m max_size=64m;
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass ${upstream};
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache history;
      # Concurrent misses of one page wait for the first to fill it: one origin read per page.
      proxy_cache_lock on;
      proxy_cache_lock_timeout 10s;
      proxy_cache_revalidate on;
      add_header x-cache $upstream_cache_status always;
    }
  }
}
`,
  );
  const proc: ChildProcess = spawn(
    NGINX,
    ['-p', dir, '-c', path.join(dir, 'nginx.conf'), '-e', path.join(dir, 'error.log')],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  let stderr = '';
  proc.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  t.teardown(async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
    await exited;
    rmSync(dir, { recursive: true, force: true });
  });
  const url = `http://127.0.0.1:${port}`;
  await until(
    async () => {
      if (proc.exitCode !== null) throw new Error(`nginx exited: ${stderr}`);
      return fetch(`${url}/healthz`).then(
        (r) => r.ok,
        () => false,
      );
    },
    10000,
    'nginx to listen',
  );
  return {
    url,
    // The access log is written per request, after the response: wait for the lines to land.
    misses: async () =>
      readFileSync(log, 'utf8')
        .split('\n')
        .filter((l) => l.startsWith('MISS ') && l.includes('/v1/streams/')),
  };
}

t.test('nginx proxy_cache: 20 clients catching up 10 pages cost about 10 origin reads', async (t) => {
  // The window holds 100 events, the 1,000 below are read from the table: each origin request for a
  // page is one catch-up query.
  const server = await startTestServer(t, await testDatabase(t), { windowEvents: 100 });
  const after = await seed(server.url, 'c', 1000);
  const nginx = await startNginx(t, server.url);
  const clients = 20;
  const pages = 10;
  const statuses: string[] = [];
  const received = await Promise.all(
    Array.from({ length: clients }, async () => {
      let cursor = after;
      let n = 0;
      for (let p = 0; p < pages; p++) {
        const res = await fetch(`${nginx.url}/v1/streams/c/events?after=${cursor}&limit=100`);
        if (res.status !== 200) throw new Error(`page ${p}: ${res.status}`);
        statuses.push(res.headers.get('x-cache') ?? '?');
        const body = (await res.json()) as { events: { data: { i: number } }[]; next: string };
        for (const e of body.events) if (e.data.i !== n++) throw new Error(`gap or repeat at ${n - 1}`);
        cursor = body.next;
      }
      return n;
    }),
  );
  t.same(received, Array(clients).fill(1000), 'every client read all 1,000 events in order');
  let misses: string[] = [];
  await until(
    async () => {
      misses = await nginx.misses();
      return misses.length >= pages;
    },
    5000,
    'the access log',
  );
  t.equal(
    misses.length,
    pages,
    `one origin read per page (${statuses.length} requests; ${misses.length} reached the service)`,
  );
  t.equal(statuses.filter((s) => s === 'HIT').length, clients * pages - misses.length);

  // The page at the tail is not stored: each read reaches the service and sees new events.
  const tailUrl = `${nginx.url}/v1/streams/c/events?after=${((await (await fetch(`${nginx.url}/v1/streams/c/events?after=${after}&limit=1000`)).json()) as { next: string }).next}&limit=100`;
  const first = await fetch(tailUrl);
  t.equal(((await first.json()) as { events: unknown[] }).events.length, 0);
  t.not(first.headers.get('x-cache'), 'HIT');
  await publish(server.url, 'c', { data: { i: 1000 } });
  const second = await fetch(tailUrl);
  t.equal(((await second.json()) as { events: unknown[] }).events.length, 1, 'the tail page is fresh');
  t.not(second.headers.get('x-cache'), 'HIT');
});
