// SSE through a PostgreSQL outage: every SSE route answers 200 while the database is down (an
// EventSource gives up for good on any other answer), primes the cursor it was given, and decides
// in-band once the database is back — a real EventSource on streams, queue activity and the Mercure
// hub reconnects through the outage and gets every event exactly once, in order; a foreign or ahead
// cursor presented during the outage gets its `reset` when the database answers again. JSON reads
// keep 503 + Retry-After. This file stops PostgreSQL, so it runs its own cluster (TEST_PG_PORT + 1060).
import os from 'node:os';
import path from 'node:path';
import { EventSource } from 'eventsource';
import t from 'tap';
import { isPrimer, parseSse, type SseMessage, textChunks } from '../src/client/sse.ts';
import { type EmbeddedDatabase, startEmbeddedPostgres } from '../src/db/embedded.ts';
import { parseCursor } from '../src/feed/cursor.ts';
import { endSseStreams } from '../src/http/sse.ts';
import { publish, sleep, startTestServer, until, within } from './helpers.ts';

const PG_PORT = Number(process.env.TEST_PG_PORT ?? 25339) + 1060;
const PG_DIR = path.join(os.tmpdir(), `commitfeed-sse-outage-${PG_PORT}`);
/** Longer than history.ts's BOUND_TRUST_MS: every cursor check wants a fresh read by then. */
const PAST_TRUST_MS = 5500;
const TOPIC = 'https://example.com/outage';
const OTHER_TAG = '0badc0de';

/** A real EventSource that records what it receives and whether it ever gave up. */
function eventSource(url: string, events: string[]) {
  const es = new EventSource(url);
  const got: { id: string; data: string }[] = [];
  const take = (m: MessageEvent) => got.push({ id: m.lastEventId, data: m.data });
  es.onmessage = take;
  for (const e of events) es.addEventListener(e, take);
  const opened = new Promise<void>((resolve) => {
    es.onopen = () => resolve();
  });
  return { es, got, opened };
}

/** A raw SSE request: its status, and its messages as they arrive (primer and comments aside). */
async function rawSse(
  t: { teardown(fn: () => unknown): void },
  url: string,
  headers: Record<string, string> = {},
) {
  const abort = new AbortController();
  t.teardown(() => abort.abort());
  const res = await within(
    fetch(url, { headers: { accept: 'text/event-stream', ...headers }, signal: abort.signal }),
    5000,
    `the answer to ${url} during the outage`,
  );
  const messages: SseMessage[] = [];
  if (res.status === 200 && res.body) {
    const body = res.body;
    void (async () => {
      for await (const m of parseSse(textChunks(body))) messages.push(m);
    })().catch(() => {});
  } else await res.arrayBuffer();
  return {
    url,
    status: res.status,
    type: res.headers.get('content-type'),
    messages,
    close: () => abort.abort(),
  };
}

async function mercurePublish(base: string, data: string): Promise<string> {
  const res = await fetch(`${base}/.well-known/mercure`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ topic: TOPIC, data }).toString(),
  });
  if (res.status !== 200) throw new Error(`mercure publish answered ${res.status}`);
  return res.text();
}

async function enqueue(base: string, queue: string, payload: unknown): Promise<void> {
  const res = await fetch(`${base}/v1/queues/${queue}/jobs`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ payload }),
  });
  if (res.status !== 201) throw new Error(`enqueue answered ${res.status}`);
  await res.arrayBuffer();
}

t.test('every SSE route answers 200 through a PostgreSQL outage and decides in-band', async (t) => {
  let pg: EmbeddedDatabase | undefined = await startEmbeddedPostgres({
    dir: PG_DIR,
    port: PG_PORT,
    fresh: true,
  });
  t.teardown(() => pg?.stop());
  const server = await startTestServer(t, pg.url);
  const base = server.url;
  const tag = server.feed.history.tag;

  // Three real EventSources, each with events received before the outage.
  const streamEs = eventSource(`${base}/v1/streams/o/events?from=earliest`, []);
  const queueEs = eventSource(`${base}/v1/queues/q/events?from=earliest`, ['enqueued']);
  const hubEs = eventSource(`${base}/.well-known/mercure?match=${encodeURIComponent(TOPIC)}`, []);
  const all = [streamEs, queueEs, hubEs];
  t.teardown(() => {
    for (const s of all) s.es.close();
  });
  await within(Promise.all(all.map((s) => s.opened)), 10_000, 'the EventSources to open');
  const published: string[] = [];
  for (let i = 0; i < 2; i++) published.push((await publish(base, 'o', { data: i })).body.id);
  await enqueue(base, 'q', 'before');
  const hubIds = [await mercurePublish(base, 'm0'), await mercurePublish(base, 'm1')];
  await until(
    () => streamEs.got.length === 2 && queueEs.got.length === 1 && hubEs.got.length === 2,
    10_000,
    'the events before the outage',
  );
  const lastStreamId = streamEs.got[1].id;
  const lastQueueId = queueEs.got[0].id;

  await pg.stop();
  pg = undefined;
  const down = await publish(base, 'o', { data: 'refused' });
  t.equal(down.status, 503, 'a publish while PostgreSQL is down: 503');
  await sleep(PAST_TRUST_MS);

  // What this process knew before the outage still holds: a cursor within the last bound read passes
  // its check without the database; one past it cannot be checked now.
  const known = await server.feed.history.check(parseCursor(lastStreamId)!);
  t.equal(known, undefined, 'a known cursor is good during the outage, past the trust period');
  const ahead = parseCursor(`9007199254740991-1.${tag}`)!;
  await t.rejects(server.feed.history.check(ahead), 'an unknown one cannot be decided yet');

  // The EventSources lose their connections and reconnect, with Last-Event-ID, into the outage.
  endSseStreams(server.app, 100);

  const json = await fetch(`${base}/v1/streams/o/events?after=${lastStreamId}`);
  t.equal(json.status, 503, 'a JSON read: 503');
  t.ok(Number(json.headers.get('retry-after')) > 0, 'with Retry-After');
  await json.arrayBuffer();
  const raw = {
    stream: await rawSse(t, `${base}/v1/streams/o/events`, { 'last-event-id': lastStreamId }),
    multi: await rawSse(t, `${base}/v1/events?stream=o&stream=p`, { 'last-event-id': lastStreamId }),
    glob: await rawSse(t, `${base}/v1/events?stream=o*`, { 'last-event-id': lastStreamId }),
    after: await rawSse(t, `${base}/v1/streams/o/events?after=${lastStreamId}`),
    latest: await rawSse(t, `${base}/v1/streams/o/events`),
    queue: await rawSse(t, `${base}/v1/queues/q/events`, { 'last-event-id': lastQueueId }),
    hub: await rawSse(t, `${base}/.well-known/mercure?match=${encodeURIComponent(TOPIC)}`, {
      'last-event-id': hubIds[1],
    }),
    hubQuery: await rawSse(
      t,
      `${base}/.well-known/mercure?match=${encodeURIComponent(TOPIC)}&last_event_id=${encodeURIComponent(hubIds[0])}`,
    ),
    hubUnknown: await rawSse(t, `${base}/.well-known/mercure?match=${encodeURIComponent(TOPIC)}`, {
      'last-event-id': 'never-published',
    }),
    hubLive: await rawSse(t, `${base}/.well-known/mercure?match=${encodeURIComponent(TOPIC)}`),
    foreign: await rawSse(t, `${base}/v1/streams/o/events`, {
      'last-event-id': `${parseCursor(lastStreamId)!.txid}-1.${OTHER_TAG}`,
    }),
    ahead: await rawSse(t, `${base}/v1/streams/o/events`, { 'last-event-id': `9007199254740991-1.${tag}` }),
    live: await rawSse(t, `${base}/v1/ops/live`),
  };
  for (const [name, r] of Object.entries(raw)) {
    t.equal(r.status, 200, `${name}: 200 while PostgreSQL is down`);
    t.match(r.type, /^text\/event-stream/, `${name}: a stream`);
  }
  const primedWith = (r: { messages: SseMessage[] }) => r.messages.find((m) => m.id !== undefined)?.id;
  await until(() => primedWith(raw.stream) !== undefined, 3000, 'the resumed stream to prime');
  t.equal(primedWith(raw.stream), lastStreamId, 'primed with the cursor it was given');
  t.equal(primedWith(raw.queue), lastQueueId, 'queue activity: primed with its cursor');
  t.equal(primedWith(raw.hub), hubIds[1], 'Mercure: primed with the id it was given');
  const bad = await rawSse(t, `${base}/v1/streams/o/events`, { 'last-event-id': 'not a cursor' });
  t.equal(bad.status, 400, 'a malformed cursor is certain before the stream starts: still a 400');

  await sleep(1000); // reconnects into the outage, each answered (an EventSource closes on a non-200)
  for (const [i, s] of all.entries()) t.not(s.es.readyState, EventSource.CLOSED, `EventSource ${i} retries`);

  pg = await startEmbeddedPostgres({ dir: PG_DIR, port: PG_PORT });
  // The first writes after the restart may still meet a stale pooled connection: retried.
  const retry = async <T>(what: string, fn: () => Promise<T>): Promise<T> => {
    for (let i = 0; ; i++) {
      try {
        return await fn();
      } catch (err) {
        if (i >= 50) throw new Error(`${what}: ${(err as Error).message}`);
        await sleep(200);
      }
    }
  };
  for (let i = 2; i < 5; i++) {
    const r = await retry('publish', async () => {
      const p = await publish(base, 'o', { data: i });
      if (p.status !== 201) throw new Error(`answered ${p.status}`);
      return p;
    });
    published.push(r.body.id);
  }
  await retry('enqueue', () => enqueue(base, 'q', 'after'));
  hubIds.push(await retry('mercure publish', () => mercurePublish(base, 'm2')));

  await until(
    () => streamEs.got.length >= 5 && queueEs.got.length >= 2 && hubEs.got.length >= 3,
    20_000,
    'every event after the restart on each EventSource',
  );
  await sleep(300); // a duplicate would follow right behind
  t.same(
    streamEs.got.map((g) => g.id),
    published,
    'streams: every event once, in order, across the outage',
  );
  t.same(
    queueEs.got.map((g) => JSON.parse(g.data)),
    [{ jobs: 1 }, { jobs: 1 }],
    'queue activity: each once',
  );
  t.same(
    hubEs.got.map((g) => g.data),
    ['m0', 'm1', 'm2'],
    'Mercure: each update once, in order',
  );
  t.same(
    hubEs.got.map((g) => g.id),
    hubIds,
  );

  // The raw streams opened during the outage resume where they said: on themselves, or — one whose
  // cursor was known at once, so its catch-up ran into the outage — after `event: unavailable` (and
  // nothing before it), on the reconnect from its primed id that an EventSource makes.
  const data = (r: { messages: SseMessage[] }) =>
    r.messages.filter(
      (m) => m.data !== undefined && !isPrimer(m) && m.event !== 'reset' && m.event !== 'unavailable',
    );
  const resumed = async (name: string, r: Awaited<ReturnType<typeof rawSse>>, n: number) => {
    const ended = () => r.messages.some((m) => m.event === 'unavailable');
    await until(() => data(r).length >= n || ended(), 20_000, `${name}: its events or its end`);
    if (!ended()) return data(r);
    t.same(data(r), [], `${name}: nothing before \`unavailable\``);
    const again = await rawSse(t, r.url, { 'last-event-id': primedWith(r)! });
    await until(() => data(again).length >= n, 20_000, `${name}: its events after reconnecting`);
    return data(again);
  };
  const tail = published.slice(2);
  t.same(
    (await resumed('stream', raw.stream, 3)).map((m) => m.id),
    tail,
    'a stream resumed during the outage: what followed its cursor',
  );
  t.same(
    (await resumed('after', raw.after, 3)).map((m) => m.id),
    tail,
  );
  t.same(
    (await resumed('multi', raw.multi, 3)).map((m) => m.id),
    tail.map((id) => `${id}/o`),
  );
  t.same(
    (await resumed('glob', raw.glob, 3)).map((m) => m.id),
    tail.map((id) => `${id}/o`),
  );
  t.same(
    (await resumed('queue', raw.queue, 1)).map((m) => JSON.parse(m.data!)),
    [{ jobs: 1 }],
  );
  await until(() => data(raw.hub).length >= 1, 10_000, 'the resumed Mercure stream');
  t.same(
    data(raw.hub).map((m) => m.data),
    ['m2'],
  );
  await until(() => data(raw.hubQuery).length >= 2, 10_000, 'the Mercure stream resumed by last_event_id');
  t.same(
    data(raw.hubQuery).map((m) => m.data),
    ['m1', 'm2'],
  );
  await until(() => data(raw.hubUnknown).length >= 3, 10_000, 'the Mercure stream from an unknown id');
  t.same(
    data(raw.hubUnknown).map((m) => m.data),
    ['m0', 'm1', 'm2'],
    'an unknown id: everything retention holds, as before the outage',
  );
  await until(() => raw.latest.messages.some(isPrimer), 10_000, 'the latest stream to prime');
  const resets = (r: { messages: SseMessage[] }) => r.messages.filter((m) => m.event === 'reset');
  await until(() => resets(raw.foreign).length > 0 && resets(raw.ahead).length > 0, 10_000, 'the resets');
  t.same(JSON.parse(resets(raw.foreign)[0].data!), { reason: 'foreign', resumeFrom: `0-0.${tag}` });
  t.same(JSON.parse(resets(raw.ahead)[0].data!), { reason: 'ahead', resumeFrom: `0-0.${tag}` });
  t.equal(primedWith(raw.ahead), `9007199254740991-1.${tag}`, 'primed with the cursor as given first');
  await until(() => data(raw.foreign).length >= 5, 10_000, 'the foreign cursor replays what retention holds');
  t.same(
    data(raw.foreign).map((m) => m.id),
    published,
    'after its reset, every retained event',
  );
  for (const r of Object.values(raw)) r.close();
});
