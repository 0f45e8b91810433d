// Edges of the feed met by third-party clients and under load: the priming frame as the `eventsource`
// npm client reads it, `latest` and read-your-writes while the tailer is behind, and cursors below the
// trim mark served the same way by every instance.
import { EventSource } from 'eventsource';
import type { CompiledQuery, Kysely } from 'kysely';
import t from 'tap';
import type { Database } from '../src/db/database.ts';
import { isPrimer, parseSse, type SseMessage, textChunks } from '../src/client/sse.ts';
import { compareCursors, parseCursor } from '../src/feed/cursor.ts';
import { appendEvents } from '../src/feed/queries/append.ts';
import { TAIL_SQL } from '../src/feed/queries/read-tail.ts';
import type { Server } from '../src/server.ts';
import { openSse, publish, sleep, sqlClient, startTestServer, testDatabase, until } from './helpers.ts';

t.test(
  'priming: the eventsource npm client that drops before its first event resumes from its connect point',
  async (t) => {
    const dbUrl = await testDatabase(t);
    let server = await startTestServer(t, dbUrl);
    const port = Number(new URL(server.url).port);
    const db = sqlClient(t, dbUrl);
    await publish(server.url, 'p', { data: 'before connect' });

    const es = new EventSource(`${server.url}/v1/streams/p/events`);
    t.teardown(() => es.close());
    const got: { id: string; data: string }[] = [];
    es.onmessage = (m) => got.push({ id: m.lastEventId, data: m.data });
    await new Promise<void>((resolve, reject) => {
      es.onopen = () => resolve();
      es.onerror = (e) => reject(new Error(`eventsource failed to open: ${e.message}`));
    });
    es.onerror = null;
    await sleep(200); // the primer follows the headers at once; let it be parsed

    // The server goes away before any event; one commits meanwhile; the client reconnects by itself.
    await server.close();
    const [missed] = await appendEvents(db, [{ stream: 'p', type: null, key: null, data: '"while away"' }]);
    server = await startTestServer(t, dbUrl, { port });
    await until(() => got.length >= 1, 15000, 'the event committed while the client was away');
    await sleep(200);
    t.same(
      got.map((g) => ({ id: g.id, data: g.data })),
      [{ id: missed.id, data: '"while away"' }],
      'that event, once; the primer is no message',
    );
  },
);

/** Makes the tailer's reads of the tail take `ms` longer (the tailer behind, without a CPU hog). */
function slowTailer(server: Server, ms: number): void {
  const tailer = server.feed.tailer as unknown as { db: Kysely<Database> };
  const real = tailer.db;
  tailer.db = new Proxy(real, {
    get(target, prop) {
      if (prop === 'executeQuery') {
        return async (q: CompiledQuery) => {
          if (q.sql === TAIL_SQL) await sleep(ms);
          return target.executeQuery(q);
        };
      }
      const v = Reflect.get(target, prop, target);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
}

t.test(
  'latest never starts before a write acknowledged earlier, however far behind the tailer is',
  async (t) => {
    const server = await startTestServer(t, await testDatabase(t));
    slowTailer(server, 1500);
    const before = await publish(server.url, 'l', { data: 'acknowledged before connect' });
    t.equal(before.status, 201);
    const sse = await openSse(t, `${server.url}/v1/streams/l/events`);
    t.equal(sse.status, 200);
    const after = await publish(server.url, 'l', { data: 'after connect' });
    await sse.waitFor(1, 15000);
    await sleep(300);
    t.same(
      sse.received.map((m) => m.id),
      [after.body.id],
      'only the event published after the subscriber connected',
    );
    t.ok(compareCursors(parseCursor(sse.primed!)!, parseCursor(before.body.id)!) >= 0, 'primed after it');
  },
);

t.test('a JSON read right after a publish sees it, however far behind the tailer is', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const first = await publish(server.url, 'j', { data: 0 });
  slowTailer(server, 1500);
  const second = await publish(server.url, 'j', { data: 1 });
  const res = await fetch(`${server.url}/v1/streams/j/events?after=${first.body.id}`);
  t.equal(res.status, 200);
  const body = (await res.json()) as { events: { id: string }[]; next: string };
  t.same(
    body.events.map((e) => e.id),
    [second.body.id],
    'read-your-writes',
  );
  t.equal(body.next, second.body.id);
});

t.test(
  'latest while a transaction holds the horizon: JSON 503 with Retry-After; SSE 200, primed once it passes, never in the past',
  async (t) => {
    const dbUrl = await testDatabase(t);
    const server = await startTestServer(t, dbUrl, { startWaitMs: 300 });
    const db = sqlClient(t, dbUrl);
    let release!: () => void;
    const mayEnd = new Promise<void>((r) => (release = r));
    let begun!: () => void;
    const isBegun = new Promise<void>((r) => (begun = r));
    const holder = db.transaction().execute(async (trx) => {
      await appendEvents(trx, [{ stream: 'h', type: null, key: null, data: '"held"' }]);
      begun();
      await mayEnd;
    });
    await isBegun;
    const acked = await publish(server.url, 'h', { data: 'acknowledged behind the horizon' });
    t.equal(acked.status, 201);
    const res = await fetch(`${server.url}/v1/streams/h/events`);
    t.equal(res.status, 503, 'JSON: no start position is both after the write and before the horizon');
    t.ok(Number(res.headers.get('retry-after')) > 0, 'with Retry-After');
    t.match(await res.json(), { code: 'unavailable' });
    // SSE: EventSource gives up on a 503. The stream opens and waits, unprimed, for a safe start.
    const abort = new AbortController();
    t.teardown(() => abort.abort());
    const sse = await fetch(`${server.url}/v1/streams/h/events`, {
      headers: { accept: 'text/event-stream' },
      signal: abort.signal,
    });
    t.equal(sse.status, 200, 'SSE: 200 while the horizon is held');
    const messages: SseMessage[] = [];
    const reading = (async () => {
      for await (const m of parseSse(textChunks(sse.body!))) messages.push(m);
    })().catch(() => {});
    await sleep(700); // past START_WAIT: the first decision failed, the stream kept waiting
    t.same(
      messages.filter((m) => m.id !== undefined),
      [],
      'nothing primed while no start is safe',
    );
    release();
    await holder;
    await until(() => messages.some(isPrimer), 10000, 'the primer once the horizon passed');
    const later = await publish(server.url, 'h', { data: 'later' });
    await until(() => messages.some((m) => m.data === '"later"'), 10000, 'the event published after');
    await sleep(200);
    t.same(
      messages.filter((m) => m.data !== undefined && !isPrimer(m)).map((m) => m.id),
      [later.body.id],
      'neither the acknowledged event nor the held one: the start is after both',
    );
    abort.abort();
    await reading;
  },
);

t.test(
  'a cursor below the trim mark gets reset from a window that still holds the dropped events',
  async (t) => {
    const dbUrl = await testDatabase(t);
    const DAY = 86_400_000;
    const retention = {
      janitorIntervalMs: 0,
      partitionIntervalMs: 3_600_000,
      partitionPremake: 3,
      retentionMs: DAY,
    };
    // A polls rarely: it has not read the tail since the other instance's drop when it serves the read.
    const a = await startTestServer(t, dbUrl, { ...retention, pollIntervalMs: 60_000 });
    const b = await startTestServer(t, dbUrl, retention);
    const old: string[] = [];
    for (let i = 0; i < 3; i++) old.push((await publish(a.url, 's', { data: `old ${i}` })).body.id);
    await until(
      () => compareCursors(a.feed.tailer.position, parseCursor(old[2])!) >= 0,
      10000,
      'A to read the old events into its window',
    );
    const run = await b.janitor.runOnce(new Date(Math.floor(Date.now() / DAY) * DAY + 2 * DAY));
    t.ok(run.dropped.length >= 1, 'B dropped the partition holding them');
    for (const s of [a, b]) {
      const res = await fetch(`${s.url}/v1/streams/s/events?after=${old[0]}`);
      const body = (await res.json()) as { events: { id: string }[]; reset?: { resumeFrom: string } };
      t.same(body.reset?.resumeFrom, old[2], `${s === a ? 'A' : 'B'}: reset to the trim mark`);
      t.same(body.events, [], 'nothing dropped is replayed');
      const sse = await openSse(t, `${s.url}/v1/streams/s/events`, { 'last-event-id': old[0] });
      const [first] = await sse.waitFor(1);
      t.same([first.event, first.id], ['reset', old[2]], 'SSE: reset first');
      await sleep(100);
      t.equal(sse.received.length, 1, 'and no dropped event after it');
    }
  },
);
