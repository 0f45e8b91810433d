// /metrics: Prometheus text with the feed's counters, pool state, queue depth and activity, and a
// stalled horizon made visible.
import { sql } from 'kysely';
import t from 'tap';
import { appendEvents } from '../src/feed/queries/append.ts';
import { openSse, pgClient, publish, sleep, sqlClient, startTestServer, testDatabase } from './helpers.ts';
import { type Claimed, ack, claim, enqueue, nack, timed, until } from './queue-helpers.ts';

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
  // Each commit either wakes the tailer or is handed on from memory (src/feed/cleared.ts).
  const local = sample(text, 'commitfeed_tailer_wakes_total', '{source="local"}') ?? 0;
  const handedOn = sample(text, 'commitfeed_commits_handed_on_total') ?? 0;
  t.ok(local + handedOn >= 1, 'local wakes or commits handed on');
  t.ok(local + handedOn <= (sample(text, 'commitfeed_commits_total') ?? 0), 'at most one of them per commit');
  t.ok(sample(text, 'commitfeed_tailer_wakes_total', '{source="notify"}') !== undefined, 'notify wakes');
  t.ok(sample(text, 'commitfeed_tailer_wakes_total', '{source="fallback"}') !== undefined, 'fallback wakes');
  t.ok((sample(text, 'commitfeed_tailer_polls_total') ?? 0) >= 1, 'tail polls');
  t.equal(sample(text, 'commitfeed_listener_connected'), 1, 'listener up');
  t.ok((sample(text, 'commitfeed_pg_pool_connections', '{state="total"}') ?? 0) >= 1, 'pool state');
  t.equal(sample(text, 'commitfeed_feed_lag_seconds'), 0, 'caught up: no lag');
  t.equal(sample(text, 'commitfeed_horizon_stall_seconds'), 0, 'no stall');
  for (const reason of ['timeout', 'in_flight', 'total']) {
    t.equal(
      sample(text, 'commitfeed_sse_slow_dropped_total', `{reason="${reason}"}`),
      0,
      `no ${reason} drops`,
    );
  }
  t.ok(
    sample(text, 'commitfeed_sse_in_flight_bytes', '{where="kernel"}') !== undefined,
    'kernel bytes in flight',
  );
  t.ok(sample(text, 'commitfeed_sse_sweep_seconds_total') !== undefined, 'the sweep costs');
  t.ok(text.includes('commitfeed_process_resident_memory_bytes'), 'process metrics');
  // The test servers' floor trails by 50ms: it is proved within a mark (each second) and a read.
  let floorAge = -1;
  await until(
    async () => {
      floorAge = sample(await scrape(server.url), 'commitfeed_tailer_floor_age_seconds') ?? -1;
      return floorAge >= 0;
    },
    10_000,
    'a tail floor in /metrics',
  );
  t.ok(floorAge >= 0.05 && floorAge < 30, `the tail floor trails by its margin and a little (${floorAge} s)`);
});

t.test(
  'Mercure counters: updates published through the hub, subscribers connected, frames written',
  async (t) => {
    const dbUrl = await testDatabase(t);
    const server = await startTestServer(t, dbUrl);
    const hub = `${server.url}/.well-known/mercure`;
    const sub = (topic: string) => `${hub}?${new URLSearchParams({ match: topic })}`;
    const post = async (data: string) => {
      const res = await fetch(hub, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ topic: 'urn:m', data }).toString(),
      });
      t.equal(res.status, 200);
      return res.text();
    };
    const before = await scrape(server.url);
    t.equal(sample(before, 'commitfeed_mercure_updates_published_total'), 0);
    t.equal(sample(before, 'commitfeed_mercure_subscribers'), 0);
    t.equal(sample(before, 'commitfeed_mercure_frames_total'), 0);

    const live = await openSse(t, sub('urn:m'));
    await openSse(t, sub('urn:other'));
    const first = await post('1');
    await post('2');
    // From the application's transaction: a frame, but not a hub publish.
    const pg = await pgClient(t, dbUrl);
    await pg.query("select commitfeed.mercure_publish('urn:m', 'sql')");
    await live.waitFor(3);
    // A native publish and native SSE are not Mercure's.
    t.equal((await publish(server.url, 'n', { data: 1 })).status, 201);
    const resumed = await openSse(t, sub('urn:m'), { 'last-event-id': first });
    await resumed.waitFor(2);
    let text = await scrape(server.url);
    t.equal(sample(text, 'commitfeed_mercure_updates_published_total'), 2, 'two hub publishes');
    t.equal(sample(text, 'commitfeed_mercure_subscribers'), 3, 'three subscribers');
    t.equal(sample(text, 'commitfeed_mercure_frames_total'), 5, '3 live frames + 2 catch-up frames');
    resumed.close();
    await until(
      async () => sample(await scrape(server.url), 'commitfeed_mercure_subscribers') === 2,
      10_000,
      'the closed subscriber to leave the gauge',
    );
    text = await scrape(server.url);
    t.equal(sample(text, 'commitfeed_mercure_frames_total'), 5, 'frames is a counter: unchanged by a close');
  },
);

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

t.test('queue metrics: depth by state from the tables, activity counted exactly', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const base = server.url;
  const q = 'mq';
  const jobs = (text: string, state: string) =>
    sample(text, 'commitfeed_queue_jobs', `{queue="${q}",state="${state}"}`);
  const count = (text: string, name: string, labels = `{queue="${q}"}`) => sample(text, name, labels);

  let text = await scrape(base);
  t.equal(sample(text, 'commitfeed_queues'), 0, 'no queues yet');
  t.equal(sample(text, 'commitfeed_queue_claim_wait_seconds_count'), 0, 'no claim waits yet');

  // a: acked; b: nacked on its last attempt (dead); c: lease expires on its last attempt (dead);
  // d: lease expires (ready again), then nacked into a retry; e: delayed; k: enqueued twice by key.
  const batch = await enqueue(base, q, [
    { payload: 'a', priority: -4 },
    { payload: 'b', priority: -3, maxAttempts: 1 },
    { payload: 'c', priority: -2, maxAttempts: 1 },
    { payload: 'd', priority: -1, maxAttempts: 3 },
    { payload: 'e', delay: 3600 },
  ]);
  t.equal(batch.status, 201);
  t.equal((await enqueue(base, q, { payload: 'k', key: 'k', priority: 5 })).status, 201);
  t.equal((await enqueue(base, q, { payload: 'k', key: 'k', priority: 5 })).status, 200, 'duplicate');

  text = await scrape(base);
  t.equal(sample(text, 'commitfeed_queues'), 1);
  t.equal(count(text, 'commitfeed_queue_jobs_enqueued_total'), 6, 'the duplicate is not counted');
  t.equal(jobs(text, 'ready'), 5);
  t.equal(jobs(text, 'delayed'), 1);
  t.equal(jobs(text, 'leased'), 0);
  t.equal(jobs(text, 'dead'), 0);
  t.ok((count(text, 'commitfeed_queue_oldest_ready_age_seconds') ?? -1) >= 0, 'oldest ready age');

  const byPayload = new Map<unknown, Claimed>();
  for (const j of await claim(base, q, { max: 2, lease: 30 })) byPayload.set(j.payload, j);
  // c and d: leases long enough to outlast the scrapes below on a loaded machine (0.2 s did not in
  // one CI run: they counted as expired at the first scrape), waited out further down.
  for (const j of await claim(base, q, { max: 2, lease: 2 })) byPayload.set(j.payload, j);
  const shortLeaseUntil = Date.now() + 2000; // after the server's own lease end (set before it answered)
  t.same([...byPayload.keys()], ['a', 'b', 'c', 'd'], 'claimed in priority order');
  text = await scrape(base);
  t.equal(count(text, 'commitfeed_queue_jobs_claimed_total'), 4);
  t.equal(jobs(text, 'leased'), 4);
  t.equal(jobs(text, 'ready'), 1);

  const a = byPayload.get('a')!;
  const b = byPayload.get('b')!;
  t.equal((await ack(base, q, b.id, a.lease)).status, 409, 'a wrong lease');
  t.equal((await ack(base, q, a.id, a.lease)).status, 204);
  const nb = await nack(base, q, b.id, { lease: b.lease, error: 'no' });
  t.equal(nb.body.state, 'dead');
  text = await scrape(base);
  t.equal(count(text, 'commitfeed_queue_acks_total'), 1, 'the refused ack is not counted');
  t.equal(count(text, 'commitfeed_queue_nacks_total', `{queue="${q}",outcome="dead"}`), 1);
  t.equal(count(text, 'commitfeed_queue_nacks_total', `{queue="${q}",outcome="retry"}`), 0);
  t.equal(count(text, 'commitfeed_queue_dead_letters_total'), 1);
  t.equal(count(text, 'commitfeed_queue_lease_expiries_total'), 0);
  t.equal(jobs(text, 'dead'), 1);

  // c and d's leases run out; the next claim releases both (c dead, d ready) in the statement that
  // takes k (d is claimable from the next statement on).
  await sleep(Math.max(0, shortLeaseUntil - Date.now()) + 100);
  const [k, ...none] = await claim(base, q, { max: 1, lease: 30 });
  t.same(none, []);
  t.equal(k.payload, 'k');
  t.equal((await ack(base, q, k.id, k.lease)).status, 204);
  const [d] = await claim(base, q, { max: 1, lease: 30 });
  t.equal(d.payload, 'd', 'the released job is claimable again');
  t.equal(d.attempt, 2);
  const nd = await nack(base, q, d.id, { lease: d.lease, delay: 3600 });
  t.equal(nd.body.state, 'ready');
  t.same(await claim(base, q, { wait: 0 }), [], 'nothing left to claim');

  text = await scrape(base);
  t.equal(count(text, 'commitfeed_queue_jobs_enqueued_total'), 6);
  t.equal(count(text, 'commitfeed_queue_jobs_claimed_total'), 6);
  t.equal(count(text, 'commitfeed_queue_acks_total'), 2);
  t.equal(count(text, 'commitfeed_queue_nacks_total', `{queue="${q}",outcome="retry"}`), 1);
  t.equal(count(text, 'commitfeed_queue_nacks_total', `{queue="${q}",outcome="dead"}`), 1);
  t.equal(count(text, 'commitfeed_queue_lease_expiries_total'), 2, 'c and d');
  t.equal(count(text, 'commitfeed_queue_dead_letters_total'), 2, 'b by nack, c by lease expiry');
  t.equal(sample(text, 'commitfeed_queue_claims_empty_total'), 1);
  t.equal(jobs(text, 'ready'), 0);
  t.equal(jobs(text, 'delayed'), 2, 'e and the retried d');
  t.equal(jobs(text, 'leased'), 0);
  t.equal(jobs(text, 'dead'), 2);
  t.equal(count(text, 'commitfeed_queue_oldest_ready_age_seconds'), 0, 'nothing ready');
  t.equal(sample(text, 'commitfeed_queue_claim_wait_seconds_count'), 4, 'four claims returned jobs');

  // A long-poll claim: counted as waiting, then its wait lands in the histogram.
  const waiting = timed(claim(base, 'lp', { wait: 10 }));
  await until(
    async () => sample(await scrape(base), 'commitfeed_queue_claims_waiting') === 1,
    10000,
    'the claim to wait',
  );
  await sleep(200);
  const enqueuedAt = Date.now();
  t.equal((await enqueue(base, 'lp', { payload: 1 })).status, 201);
  const got = await waiting;
  t.equal(got.value.length, 1, 'woken by the enqueue');
  text = await scrape(base);
  t.equal(sample(text, 'commitfeed_queue_claims_waiting'), 0);
  t.equal(sample(text, 'commitfeed_queue_claim_wait_seconds_count'), 5);
  t.equal(sample(text, 'commitfeed_queue_claim_wait_seconds_bucket', '{le="+Inf"}'), 5);
  t.equal(sample(text, 'commitfeed_queue_claim_wait_seconds_bucket', '{le="60"}'), 5);
  t.ok(
    (sample(text, 'commitfeed_queue_claim_wait_seconds_bucket', '{le="0.1"}') ?? 99) <= 4,
    'the long-poll waited past 0.1 s',
  );
  t.ok((sample(text, 'commitfeed_queue_claim_wait_seconds_sum') ?? 0) >= 0.2, 'its wait is in the sum');
  t.ok(got.at >= enqueuedAt, 'answered after the enqueue');
  t.equal(sample(text, 'commitfeed_queue_jobs_claimed_total', '{queue="lp"}'), 1);
  t.equal(sample(text, 'commitfeed_queues'), 2);
});

t.test('a failing queue depth read leaves the scrape up', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl);
  const db = sqlClient(t, dbUrl);
  t.equal((await enqueue(server.url, 'f', { payload: 1 })).status, 201);
  let text = await scrape(server.url);
  t.equal(sample(text, 'commitfeed_queue_jobs', '{queue="f",state="ready"}'), 1);
  await sql`alter table commitfeed.jobs rename to jobs_away`.execute(db);
  t.teardown(() =>
    sql`alter table if exists commitfeed.jobs_away rename to jobs`.execute(db).catch(() => {}),
  );
  text = await scrape(server.url);
  t.equal(sample(text, 'commitfeed_queues'), -1, 'the failed read is visible');
  t.equal(sample(text, 'commitfeed_queue_jobs', '{queue="f",state="ready"}'), undefined, 'no stale depth');
  t.equal(sample(text, 'commitfeed_publishes_total'), 0, 'the other metrics are still there');
  await sql`alter table commitfeed.jobs_away rename to jobs`.execute(db);
  text = await scrape(server.url);
  t.equal(sample(text, 'commitfeed_queues'), 1, 'back once the read works');
});
