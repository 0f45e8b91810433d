// Backpressure and limits: a subscriber that stops reading is dropped without the server buffering
// for it (and resumes losing nothing); SSE connections per process and streams per connection are
// capped with clear errors before any stream starts.
import http from 'node:http';
import t from 'tap';
import { isPrimer, parseSse } from '../src/client/sse.ts';
import { openSse, publish, sleep, startTestServer, testDatabase, within } from './helpers.ts';

t.test(
  'a subscriber that stops reading is dropped, memory stays flat, and it resumes losing nothing',
  async (t) => {
    const dbUrl = await testDatabase(t);
    const server = await startTestServer(t, dbUrl, { slowSubscriberMaxMs: 1000, pageSize: 100 });
    const url = new URL(`${server.url}/v1/streams/slow/events`);

    // A client that reads the headers and then nothing at all.
    const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
      const req = http.get(url, { headers: { accept: 'text/event-stream' } }, resolve);
      req.on('error', reject);
      t.teardown(() => req.destroy());
    });
    t.equal(res.statusCode, 200);
    res.pause();
    res.setEncoding('utf8');
    // A reader that keeps up, on the same stream.
    const good = await openSse(t, `${server.url}/v1/streams/slow/events`);

    // ~12 MB of events: far more than the socket buffers between the server and the stalled client (~4 MB here).
    const data = 'x'.repeat(6000);
    const published: string[] = [];
    let maxBuffered = 0;
    // What the hub holds, for a wait that runs out.
    const state = () =>
      `hub ${JSON.stringify(server.feed.hub.stats)}, ${server.feed.hub.subscriberCount} subscribers, ` +
      `tail ${JSON.stringify(server.feed.tailer.position)}, good reader ${good.received.length} of ${published.length}`;
    for (let i = 0; i < 20; i++) {
      const r = await within(
        publish(
          server.url,
          'slow',
          Array.from({ length: 100 }, (_, j) => ({ data: { i, j, data } })),
        ),
        30_000,
        () => `publish ${i} to answer (${state()})`,
      );
      if (r.status !== 201) t.fail(`batch ${i} answered ${r.status}`);
      for (const e of r.body.events!) published.push(e.id);
      maxBuffered = Math.max(maxBuffered, server.feed.hub.bufferedBytes());
    }
    await within(good.waitFor(published.length, 30000), 35_000, state).catch((err: Error) =>
      t.fail(`${err.message} (${state()})`),
    );
    t.equal(good.received.length, published.length, 'the reader that keeps up got everything');

    // Dropped by the sweep once its socket has taken nothing for slowSubscriberMaxMs.
    for (let i = 0; i < 100 && server.feed.hub.stats.dropped === 0; i++) await sleep(50);
    t.equal(server.feed.hub.stats.dropped, 1, `the stalled subscriber was dropped (${state()})`);
    // Not dropped: end it here, so that reading what reached it below ends (the failure is above).
    if (server.feed.hub.stats.dropped === 0) res.destroy();
    t.equal(server.feed.hub.subscriberCount, 1, 'only the good reader is left');
    maxBuffered = Math.max(maxBuffered, server.feed.hub.bufferedBytes());
    // One tailer page of frames (100 × 6 KB) plus the socket's high-water mark, never the backlog.
    t.ok(
      maxBuffered < 2_000_000,
      `server-side buffer stayed bounded (max ${maxBuffered} bytes for 12 MB published)`,
    );

    // The stalled client now reads what reached it: complete frames only, each with its id.
    async function* chunks() {
      try {
        for await (const c of res) yield c as string;
      } catch {
        // the server destroyed the connection: what arrived before is still valid
      }
    }
    const got: string[] = [];
    let primed: string | undefined;
    for await (const m of parseSse(chunks())) {
      if (isPrimer(m)) primed ??= m.id;
      else if (m.data !== undefined) got.push(m.id!);
    }
    t.ok(primed !== undefined, 'it had its primed id');
    t.ok(
      got.length < published.length,
      `it got a prefix (${got.length} of ${published.length}) before the drop`,
    );
    t.same(got, published.slice(0, got.length), 'the prefix is in order, without gaps');

    // Resume from the last id it actually received: the rest, exactly once.
    const last = got.length > 0 ? got[got.length - 1] : primed!;
    const resumed = await openSse(t, `${server.url}/v1/streams/slow/events`, { 'last-event-id': last });
    await resumed.waitFor(published.length - got.length, 30000);
    await sleep(100);
    t.same(
      [...got, ...resumed.received.map((m) => m.id!)],
      published,
      'prefix + resume = every event, once, in order',
    );
  },
);

t.test('SSE connections per process are capped: 503 with Retry-After before the stream starts', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { maxSseConnections: 2 });
  const a = await openSse(t, `${server.url}/v1/streams/c/events`);
  const b = await openSse(t, `${server.url}/v1/events?stream=c&stream=d`);
  t.equal(a.status, 200);
  t.equal(b.status, 200);
  const res = await fetch(`${server.url}/v1/streams/c/events`, { headers: { accept: 'text/event-stream' } });
  t.equal(res.status, 503, 'the third is refused');
  t.equal(res.headers.get('retry-after'), '2', 'with Retry-After');
  t.match(res.headers.get('content-type'), /application\/json/, 'as a JSON error, not a stream');
  t.match(await res.json(), { statusCode: 503, code: 'too_many_connections' });
  for (const path of [
    '/v1/queues/q/events',
    `/.well-known/mercure?match=${encodeURIComponent('https://x/c')}`,
  ]) {
    const other = await fetch(`${server.url}${path}`, { headers: { accept: 'text/event-stream' } });
    t.equal(other.status, 503, `${path.split('?')[0]} counts against the same cap`);
    await other.arrayBuffer();
  }
  const json = await fetch(`${server.url}/v1/streams/c/events`);
  t.equal(json.status, 200, 'JSON reads are not SSE connections');
  await json.arrayBuffer();

  a.close();
  for (let i = 0; i < 100 && server.feed.hub.subscriberCount > 1; i++) await sleep(20);
  const c = await openSse(t, `${server.url}/v1/streams/c/events`);
  t.equal(c.status, 200, 'a slot freed by a disconnect is reused');
});

t.test('streams per connection are capped with a clear 400', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl);
  const qs = (n: number) => Array.from({ length: n }, (_, i) => `stream=s${i}`).join('&');
  const ok = await openSse(t, `${server.url}/v1/events?${qs(100)}`);
  t.equal(ok.status, 200, '100 streams on one connection');
  ok.close();
  const res = await fetch(`${server.url}/v1/events?${qs(101)}`, { headers: { accept: 'text/event-stream' } });
  t.equal(res.status, 400, '101 are refused');
  const body = (await res.json()) as { code: string; message: string };
  t.match(body.code, /^invalid_(request|name)$/);
  t.match(body.message, /100/, 'the message names the limit');
});
