// Feed reads on a real streaming hot standby (READ_DATABASE_URL), started here from the embedded
// PostgreSQL binaries (test/standby-cluster.ts) and stopped even when a test fails. The servers'
// fallback poll is set beyond the tests' patience: only a wake (a local commit, a NOTIFY) makes them
// read, so each live delivery below shows a wake leading to a standby read that sees the waking commit.
import pg from 'pg';
import t from 'tap';
import type { Db } from '../src/db/database.ts';
import { migrate } from '../src/db/migrate.ts';
import type { Cursor } from '../src/feed/cursor.ts';
import { readAllNamesRange } from '../src/feed/queries/all-names-range.ts';
import { currentHorizon } from '../src/feed/queries/current-horizon.ts';
import { FeedReads, horizonCovers, laterLsn } from '../src/feed/reads.ts';
import { readTopicRange } from '../src/mercure/queries.ts';
import type { Server } from '../src/server.ts';
import { type SseReader, openSse, publish, sleep, sqlClient, startTestServer, until } from './helpers.ts';
import { type StandbyCluster, startStandbyCluster } from './standby-cluster.ts';

// Two ports of their own beside the run's PostgreSQL (primary, standby): TEST_PG_PORT + 10 and + 11.
const PORT = Number(process.env.TEST_PG_PORT ?? 25339) + 10;

t.setTimeout(120_000);

type T = Parameters<typeof startTestServer>[0];

let cluster: StandbyCluster | undefined;
t.before(async () => {
  cluster = await startStandbyCluster({ port: PORT });
});
t.teardown(() => cluster?.stop());
const c = () => cluster!;

/**
 * The tests that say "no read went to the primary" wait this long for a replaying standby: on a
 * loaded machine replay can trail the primary by more than the 300 ms the other tests use to see a
 * paused standby quickly, and a read that waits it out is rightly sent to the primary.
 */
const STEADY_LAG_WAIT_MS = 10_000;

async function server(t: T, overrides: object = {}): Promise<Server> {
  const s = await startTestServer(t, c().primaryUrl, {
    readDatabaseUrls: [c().standbyUrl],
    readLagWaitMs: 300,
    pollIntervalMs: 600_000,
    ...overrides,
  });
  await until(() => state(s) === 'ok', 10_000, 'the standby to serve reads');
  return s;
}

const state = (s: Server) => s.feed.reads.status()[0].state;
const ids = (r: SseReader) => r.received.map((m) => m.id);
const datas = (r: SseReader) => r.received.map((m) => JSON.parse(m.data!).n as number);

async function primaryClient(t: T): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: c().primaryUrl });
  client.on('error', () => {});
  await client.connect();
  t.teardown(() => client.end().catch(() => {}));
  return client;
}

/** Reads the (first) standby has served. */
const standbyReads = (s: Server) => s.feed.reads.status()[0].reads;
const upTo = (n: number) => Array.from({ length: n }, (_, i) => i);
const mercure = (t: T, s: Server, topic: string, headers: Record<string, string> = {}) =>
  openSse(t, `${s.url}/.well-known/mercure?match=${encodeURIComponent(topic)}`, headers);

/** Publishes Mercure updates {n: from..from+count-1} to `topic` in one transaction on the primary. */
async function mercureUpdates(t: T, topic: string, from: number, count: number): Promise<void> {
  const client = await primaryClient(t);
  await client.query(
    `select commitfeed.mercure_publish($1::text, json_build_object('n', g)::text)
     from generate_series($2::int, $3::int) g order by g`,
    [topic, from, from + count - 1],
  );
}

async function readyz(s: Server): Promise<{ status: string; checks: Record<string, boolean> }> {
  const res = await fetch(`${s.url}/readyz`);
  return (await res.json()) as never;
}

t.test('laterLsn: WAL positions compare as 64-bit numbers, not as text', async (t) => {
  t.equal(laterLsn('0/9', '0/10'), '0/10');
  t.equal(laterLsn('1/0', '0/FFFFFFFF'), '1/0');
  t.equal(laterLsn('A/1', undefined), 'A/1');
});

t.test('horizonCovers: a page is complete when its horizon is past the bound', async (t) => {
  t.ok(horizonCovers(11, { txid: 10, id: 5 }));
  t.notOk(horizonCovers(10, { txid: 10, id: 5 }), 'transaction 10 may still be running');
  t.ok(horizonCovers(10, { txid: 10, id: 0 }), 'a horizon position needs only the transactions below it');
  t.notOk(horizonCovers(9, { txid: 10, id: 0 }));
});

t.test("the standby's own snapshot holds back a transaction still open on the primary", async (t) => {
  const s = await server(t);
  const a = await primaryClient(t);
  await a.query('begin');
  const { rows } = await a.query<{ xid: string }>(
    `select pg_current_xact_id()::text as xid, commitfeed.publish('h', '{"n":1}')`,
  );
  const sub = await openSse(t, `${s.url}/v1/streams/h/events`);
  const b = await publish(s.url, 'h', { data: { n: 2 } });
  t.equal(b.status, 201);
  await c().caughtUp();
  const [snap] = await c().query<{ xmin: string; visible: number }>(
    'standby',
    `select pg_snapshot_xmin(pg_current_snapshot())::text as xmin,
            (select count(*)::int from commitfeed.feed where stream = 'h') as visible`,
  );
  t.equal(snap.visible, 1, 'the standby sees the committed event only');
  t.ok(Number(snap.xmin) <= Number(rows[0].xid), "the standby's horizon is at or below the open transaction");
  await s.feed.tailer.settled();
  t.same(sub.received, [], 'nothing is delivered past the open transaction');
  await a.query('commit');
  await sub.waitFor(2, 10_000);
  t.same(datas(sub), [1, 2], 'both events, in commit order (the open transaction first)');
  t.ok(s.feed.reads.stats.standby > 0, 'reads ran on the standby');
});

t.test('live and catch-up reads come from the standby, each event once, in order', async (t) => {
  const s = await server(t, { windowEvents: 100, pageSize: 50, readLagWaitMs: STEADY_LAG_WAIT_MS });
  const live = await openSse(t, `${s.url}/v1/streams/c/events`);
  const before = { ...s.feed.reads.stats };
  const N = 400;
  for (let i = 0; i < N; i += 100) {
    const events = Array.from({ length: 100 }, (_, k) => ({ data: { n: i + k } }));
    t.equal((await publish(s.url, 'c', events)).status, 201);
  }
  await live.waitFor(N, 20_000);
  t.same(
    datas(live),
    Array.from({ length: N }, (_, i) => i),
    'live subscriber: every event once, in order',
  );
  // Far behind the 100-event window: catch-up pages from the table, on the standby.
  const history = await openSse(t, `${s.url}/v1/streams/c/events?from=earliest`);
  await history.waitFor(N, 20_000);
  t.same(ids(history), ids(live), 'catch-up delivers the same events as live');
  const res = await fetch(`${s.url}/v1/streams/c/events?from=earliest&limit=1000`);
  const page = (await res.json()) as { events: { id: string }[] };
  t.same(
    page.events.map((e) => e.id),
    ids(live),
    'a JSON page holds the same events',
  );
  t.ok(s.feed.reads.stats.standby - before.standby >= 8, 'tail and catch-up pages were read on the standby');
  t.equal(s.feed.reads.stats.fallbacks, before.fallbacks, 'no read went to the primary');
});

t.test('glob and Mercure catch-up pages come from the standby, each event once, in order', async (t) => {
  const s = await server(t, { windowEvents: 100, pageSize: 50, readLagWaitMs: STEADY_LAG_WAIT_MS });
  const liveGlob = await openSse(t, `${s.url}/v1/events?stream=gs.*`);
  const liveTopic = await mercure(t, s, 'urn:standby:s');
  const N = 300;
  for (let i = 0; i < N; i += 50) {
    const events = Array.from({ length: 50 }, (_, k) => ({ data: { n: i + k } }));
    t.equal((await publish(s.url, i % 100 === 0 ? 'gs.a' : 'gs.b', events)).status, 201);
    t.equal((await publish(s.url, 'other', events)).status, 201, 'a stream the glob does not match');
  }
  await mercureUpdates(t, 'urn:standby:s', 0, 120);
  await liveGlob.waitFor(N, 20_000);
  await liveTopic.waitFor(120, 20_000);
  t.same(datas(liveGlob), upTo(N), 'live glob subscriber: every event once, in order');
  t.same(datas(liveTopic), upTo(120), 'live Mercure subscriber: every update once, in order');
  await s.feed.tailer.settled();
  const fallbacks = s.feed.reads.stats.fallbacks;

  // Catch-up from the start: pages from the table (the glob's through every named stream).
  const before = standbyReads(s);
  const glob = await openSse(t, `${s.url}/v1/events?stream=gs.*&from=earliest`);
  await glob.waitFor(N, 20_000);
  t.same(ids(glob), ids(liveGlob), 'the glob catch-up delivers the same events as live');
  t.ok(standbyReads(s) - before >= (2 * N) / 50, 'its pages were read on the standby');
  const between = standbyReads(s);
  const topic = await mercure(t, s, 'urn:standby:s', { 'last-event-id': 'earliest' });
  await topic.waitFor(120, 20_000);
  t.same(ids(topic), ids(liveTopic), 'the Mercure catch-up delivers the same updates as live');
  t.ok(standbyReads(s) - between >= 120 / 50, 'its pages were read on the standby');
  t.equal(s.feed.reads.stats.fallbacks, fallbacks, 'no read went to the primary');
});

t.test('replay paused: glob and Mercure catch-up pages fall over to the primary', async (t) => {
  const s = await server(t, { pageSize: 20 });
  const liveGlob = await openSse(t, `${s.url}/v1/events?stream=gp.*`);
  const liveTopic = await mercure(t, s, 'urn:standby:p');
  await c().pause();
  t.teardown(() => c().resume());
  const events = Array.from({ length: 100 }, (_, n) => ({ data: { n } }));
  t.equal((await publish(s.url, 'gp.a', events)).status, 201);
  await mercureUpdates(t, 'urn:standby:p', 0, 50);
  await liveGlob.waitFor(100, 10_000);
  await liveTopic.waitFor(50, 10_000);
  await until(() => state(s) === 'lagging', 5000, 'the standby to be reported lagging');
  const fallbacks = s.feed.reads.stats.fallbacks;
  const glob = await openSse(t, `${s.url}/v1/events?stream=gp.*&from=earliest`);
  await glob.waitFor(100, 10_000);
  t.same(ids(glob), ids(liveGlob), 'the glob catch-up reads everything from the primary');
  const topic = await mercure(t, s, 'urn:standby:p', { 'last-event-id': 'earliest' });
  await topic.waitFor(50, 10_000);
  t.same(ids(topic), ids(liveTopic), 'so does the Mercure catch-up');
  t.ok(s.feed.reads.stats.fallbacks - fallbacks >= 100 / 20 + 50 / 20, 'their pages went to the primary');

  await c().resume();
  await until(() => state(s) === 'ok', 10_000, 'the standby to serve reads again');
  t.equal((await publish(s.url, 'gp.b', { data: { n: 100 } })).status, 201);
  await mercureUpdates(t, 'urn:standby:p', 50, 1);
  for (const [r, n] of [
    [liveGlob, 101],
    [glob, 101],
    [liveTopic, 51],
    [topic, 51],
  ] as const) {
    await r.waitFor(n, 10_000);
    t.same(datas(r), upTo(n), 'each subscriber: every event once, in order');
  }
});

// Below a server, whose woken tail read finds a lagging standby first: here the standby still counts
// as `ok` when a catch-up page meets it behind the page's bound.
t.test('a glob or topic page from a standby behind its bound is read again on the primary', async (t) => {
  const primary = sqlClient(t, c().primaryUrl);
  await migrate(primary);
  const reads = new FeedReads(primary, [{ name: 'standby', db: sqlClient(t, c().standbyUrl) }], {
    lagWaitMs: 300,
    probeIntervalMs: 100,
    log: { warn() {}, info() {} },
  });
  t.teardown(() => reads.stop());
  t.teardown(() => c().resume());
  await reads.start();
  const client = await primaryClient(t);
  for (const [what, publishSql, read] of [
    [
      'glob',
      `select commitfeed.publish('gh.a', '{"n":1}')`,
      (after: Cursor, bound: Cursor) => (db: Db) => readAllNamesRange(db, after, bound, 100),
    ],
    [
      'topic',
      `select commitfeed.mercure_publish('urn:standby:h', '{"n":1}')`,
      (after: Cursor, bound: Cursor) => (db: Db) => readTopicRange(db, ['urn:standby:h'], after, bound, 100),
    ],
  ] as const) {
    await until(() => reads.status()[0].state === 'ok', 10_000, 'the standby to serve reads');
    await c().pause();
    const after = await currentHorizon(primary);
    await client.query(publishSql);
    const bound = await currentHorizon(primary);
    const { fallbacks, standby } = reads.stats;
    const page = await reads.range(bound, read(after, bound));
    t.equal(page.events.length, 1, `the ${what} page holds the event the standby has not replayed`);
    t.ok(horizonCovers(page.horizon, bound), 'its horizon covers the bound');
    t.equal(reads.stats.standby, standby, "the standby's page was not kept");
    t.equal(reads.stats.fallbacks, fallbacks + 1, 'it was read on the primary');
    t.equal(reads.status()[0].state, 'lagging');
    await c().resume();
  }
});

t.test('replay paused: read-your-writes and live delivery fall over to the primary', async (t) => {
  const s = await server(t);
  const live = await openSse(t, `${s.url}/v1/streams/p/events`);
  await c().pause();
  t.teardown(() => c().resume());
  const first = await publish(s.url, 'p', { data: { n: 1 } });
  t.equal(first.status, 201);
  // The standby has not replayed the publish: the read waits READ_LAG_WAIT, then reads the primary.
  const res = await fetch(`${s.url}/v1/streams/p/events?from=earliest`);
  const page = (await res.json()) as { events: { id: string }[] };
  t.same(
    page.events.map((e) => e.id),
    [first.body.id],
    'a JSON read right after the publish sees it',
  );
  const latest = await openSse(t, `${s.url}/v1/streams/p/events`);
  const second = await publish(s.url, 'p', { data: { n: 2 } });
  await latest.waitFor(1, 10_000);
  t.same(ids(latest), [second.body.id], 'a `latest` subscriber starts after the acknowledged publish');
  await live.waitFor(2, 10_000);
  t.same(ids(live), [first.body.id, second.body.id], 'live delivery goes on through the primary');
  await until(() => state(s) === 'lagging', 5000, 'the standby to be reported lagging');
  // Two probes later it is still lagging: having replayed where the primary was one probe ago does
  // not bring back a standby whose replay stopped short of what a read needed.
  await sleep(2500);
  t.equal(state(s), 'lagging', 'and stays lagging while replay is paused');
  const ready = await readyz(s);
  t.equal(ready.status, 'degraded', '/readyz reports the standby');
  t.equal(ready.checks.standby, false);
  const metrics = await (await fetch(`${s.url}/metrics`)).text();
  t.match(
    metrics,
    /commitfeed_standby_up\{standby="[^"]+"\} 0/,
    '/metrics reports the standby out of service',
  );
  t.match(metrics, /commitfeed_standby_lag_bytes\{standby="[^"]+"\} [1-9]/, 'with its lag in bytes');

  await c().resume();
  await until(() => state(s) === 'ok', 10_000, 'the standby to serve reads again');
  t.equal((await readyz(s)).status, 'ready');
  const third = await publish(s.url, 'p', { data: { n: 3 } });
  await live.waitFor(3, 10_000);
  t.same(ids(live), [first.body.id, second.body.id, third.body.id], 'nothing lost or repeated');
});

t.test('two standbys: reads go round both, each event once, in order', async (t) => {
  // One server under two URLs stands in for two standbys: each has its own pool, state and name.
  const s = await startTestServer(t, c().primaryUrl, {
    readDatabaseUrls: [c().standbyUrl, `${c().standbyUrl}?application_name=second`],
    readLagWaitMs: STEADY_LAG_WAIT_MS,
    pollIntervalMs: 600_000,
    windowEvents: 100,
    pageSize: 10,
  });
  await until(() => s.feed.reads.status().every((x) => x.state === 'ok'), 10_000, 'both standbys');
  t.equal(new Set(s.feed.reads.status().map((x) => x.name)).size, 2, 'two names');
  const live = await openSse(t, `${s.url}/v1/streams/two/events`);
  const events = Array.from({ length: 150 }, (_, n) => ({ data: { n } }));
  t.equal((await publish(s.url, 'two', events)).status, 201);
  await live.waitFor(150, 10_000);
  const history = await openSse(t, `${s.url}/v1/streams/two/events?from=earliest`);
  await history.waitFor(150, 10_000);
  t.same(datas(history), datas(live), 'catch-up over both standbys matches live delivery');
  t.same(
    datas(live),
    Array.from({ length: 150 }, (_, n) => n),
  );
  t.equal(s.feed.reads.stats.fallbacks, 0, 'no read went to the primary');
  t.ok(
    s.feed.reads.status().every((x) => x.reads > 0),
    'both standbys served reads',
  );
});

t.test('standby restarted: readers fail over and come back without a gap or a duplicate', async (t) => {
  const s = await server(t);
  const live = await openSse(t, `${s.url}/v1/streams/r/events`);
  const published: string[] = [];
  const put = async (n: number) => {
    const r = await publish(s.url, 'r', { data: { n } });
    t.equal(r.status, 201);
    published.push(r.body.id);
  };
  await put(0);
  await live.waitFor(1, 10_000);
  await c().stopStandby();
  let restarted = false;
  t.teardown(() => (restarted ? undefined : c().startStandby()));
  for (let n = 1; n <= 5; n++) await put(n);
  await live.waitFor(6, 10_000);
  t.equal(state(s), 'down', 'the stopped standby is reported down');
  await c().startStandby();
  restarted = true;
  await until(() => state(s) === 'ok', 15_000, 'the restarted standby to serve reads');
  for (let n = 6; n <= 10; n++) await put(n);
  await live.waitFor(11, 10_000);
  t.same(ids(live), published, 'every event once, in order, across the restart');
  const resumed = await openSse(t, `${s.url}/v1/streams/r/events`, { 'last-event-id': published[2] });
  await resumed.waitFor(8, 10_000);
  t.same(ids(resumed), published.slice(3), 'a resume after the restart reads the rest from the standby');
});

t.test('standby promoted: it is left for good, the primary serves the reads', async (t) => {
  const s = await server(t);
  const live = await openSse(t, `${s.url}/v1/streams/q/events`);
  const one = await publish(s.url, 'q', { data: { n: 1 } });
  await live.waitFor(1, 10_000);
  await c().promote();
  const two = await publish(s.url, 'q', { data: { n: 2 } });
  await live.waitFor(2, 10_000);
  t.same(ids(live), [one.body.id, two.body.id]);
  await until(() => state(s) === 'promoted', 5000, 'the promoted standby to be reported');
  t.equal((await readyz(s)).status, 'degraded');
  const three = await publish(s.url, 'q', { data: { n: 3 } });
  await live.waitFor(3, 10_000);
  t.same(ids(live), [one.body.id, two.body.id, three.body.id], 'nothing lost or repeated');
});
