// /metrics: Prometheus text with the feed's counters, pool state, and a stalled horizon made visible.
import { sql } from 'kysely';
import t from 'tap';
import { appendEvents } from '../src/feed/queries.ts';
import { openSse, publish, sleep, sqlClient, startTestServer, testDatabase } from './helpers.ts';

/** The value of one sample line (`name{labels} value`), or undefined when absent. */
function sample(text: string, name: string, labels = ''): number | undefined {
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const sp = line.lastIndexOf(' ');
    const key = line.slice(0, sp);
    if (key === name + labels || (labels === '' && key === name)) return Number(line.slice(sp + 1));
  }
  return undefined;
}

async function scrape(base: string): Promise<string> {
  const res = await fetch(`${base}/metrics`);
  if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
  if (!(res.headers.get('content-type') ?? '').startsWith('text/plain')) throw new Error('not text/plain');
  return res.text();
}

t.test('counters follow publishes, SSE connections and delivered frames', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl);
  const sse = await openSse(t, `${server.url}/v1/streams/m/events`);
  t.equal((await publish(server.url, 'm', { data: 1 })).status, 201);
  t.equal((await publish(server.url, 'm', [{ data: 2 }, { data: 3 }])).status, 201);
  await sse.waitFor(3);
  const text = await scrape(server.url);
  t.equal(sample(text, 'commitfeed_publishes_total'), 2, 'two publish requests');
  t.equal(sample(text, 'commitfeed_events_written_total'), 3, 'three events');
  t.ok((sample(text, 'commitfeed_commits_total') ?? 0) >= 1, 'commits counted');
  t.equal(sample(text, 'commitfeed_sse_connections'), 1, 'one SSE connection');
  t.equal(sample(text, 'commitfeed_sse_frames_total'), 3, 'three frames delivered');
  t.ok((sample(text, 'commitfeed_tailer_wakes_total', '{source="local"}') ?? 0) >= 1, 'local wakes');
  t.ok(sample(text, 'commitfeed_tailer_wakes_total', '{source="notify"}') !== undefined, 'notify wakes');
  t.ok(sample(text, 'commitfeed_tailer_wakes_total', '{source="fallback"}') !== undefined, 'fallback wakes');
  t.ok((sample(text, 'commitfeed_tailer_polls_total') ?? 0) >= 1, 'tail polls');
  t.equal(sample(text, 'commitfeed_listener_connected'), 1, 'listener up');
  t.ok((sample(text, 'commitfeed_pg_pool_connections', '{state="total"}') ?? 0) >= 1, 'pool state');
  t.equal(sample(text, 'commitfeed_feed_lag_seconds'), 0, 'caught up: no lag');
  t.equal(sample(text, 'commitfeed_horizon_stall_seconds'), 0, 'no stall');
  t.equal(sample(text, 'commitfeed_sse_slow_dropped_total'), 0);
  t.ok(text.includes('commitfeed_process_resident_memory_bytes'), 'process metrics');
});

t.test('a writing transaction held open shows as a horizon stall naming its backend', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl);
  const db = sqlClient(t, dbUrl);
  const sse = await openSse(t, `${server.url}/v1/streams/h/events`);
  let release!: () => void;
  const mayCommit = new Promise<void>((r) => (release = r));
  let blockerPid = 0;
  let opened!: () => void;
  const isOpen = new Promise<void>((r) => (opened = r));
  const held = db.transaction().execute(async (trx) => {
    await sql`set local application_name = 'held-writer'`.execute(trx);
    const { rows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(trx);
    blockerPid = rows[0].pid;
    await appendEvents(trx, [{ stream: 'h', type: null, key: null, data: '"held"' }]);
    opened();
    await mayCommit;
  });
  await isOpen;
  t.equal((await publish(server.url, 'h', { data: 'after' })).status, 201);

  let text = '';
  for (let i = 0; i < 100; i++) {
    text = await scrape(server.url);
    if ((sample(text, 'commitfeed_horizon_stall_seconds') ?? 0) > 0) break;
    await sleep(20);
  }
  t.ok((sample(text, 'commitfeed_horizon_stall_seconds') ?? 0) > 0, 'stall reported');
  const age = sample(
    text,
    'commitfeed_horizon_blocker_age_seconds',
    `{pid="${blockerPid}",application_name="held-writer"}`,
  );
  t.ok(age !== undefined && age >= 0, 'the blocking backend is named by pid and application_name');
  t.ok((sample(text, 'commitfeed_feed_lag_seconds') ?? -1) > 0, 'feed lag grows while rows wait');
  t.equal(sse.received.length, 0, 'nothing delivered past the open transaction');

  release();
  await held;
  const got = await sse.waitFor(2);
  t.same(
    got.map((m) => m.data),
    ['"held"', '"after"'],
    'both delivered once it ends (its commit notified nothing new)',
  );
  for (let i = 0; i < 100; i++) {
    text = await scrape(server.url);
    if (sample(text, 'commitfeed_horizon_stall_seconds') === 0) break;
    await sleep(20);
  }
  t.equal(sample(text, 'commitfeed_horizon_stall_seconds'), 0, 'stall cleared');
});
