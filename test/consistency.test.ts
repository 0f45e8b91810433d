// The guarantees that the obvious design breaks: out-of-order commits, rollbacks, concurrent
// idempotent publishes, a lost LISTEN connection, and group commit isolating a bad request.
import { sql } from 'kysely';
import t from 'tap';
import { Batcher } from '../src/commit/batcher.ts';
import { appendEvents } from '../src/feed/queries/append.ts';
import { appendCheckedEvents } from '../src/feed/queries/append-checked.ts';
import type { CheckedEventInput } from '../src/feed/event.ts';
import {
  cursorId,
  feedRows,
  openSse,
  publish,
  sleep,
  sqlClient,
  startTestServer,
  testDatabase,
  until,
} from './helpers.ts';

// The batcher takes events toEventInput() checked; these are valid by construction.
const ev = (stream: string, data: unknown) =>
  ({ stream, type: null, key: null, data: JSON.stringify(data) }) as CheckedEventInput;

t.test('out-of-order commits: a lower id committing last is delivered, in (txid, id) order', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl);
  const db = sqlClient(t, dbUrl);
  const sse = await openSse(t, `${server.url}/v1/streams/o/events`);

  // A takes the lower id and holds its transaction open; B takes a higher id and commits first.
  let releaseA!: () => void;
  const aMayCommit = new Promise<void>((r) => (releaseA = r));
  let aInserted!: () => void;
  const aHasInserted = new Promise<void>((r) => (aInserted = r));
  const a = db.transaction().execute(async (trx) => {
    const [res] = await appendEvents(trx, [ev('o', 'A')]);
    aInserted();
    await aMayCommit;
    return res;
  });
  await aHasInserted;
  const b = await publish(server.url, 'o', { data: 'B' });
  t.equal(b.status, 201, 'B committed while A is open');

  // The tailer has read past B's commit and holds it back: the moment a wrong reader would deliver it.
  await until(() => server.feed.tailer.horizonStallMs > 0, 10000, 'the tailer to see B behind the horizon');
  t.equal(sse.received.length, 0, 'B waits behind the horizon while A is open (never delivered before A)');
  releaseA();
  const aRes = await a;
  const aId = cursorId(aRes.id);
  const bId = cursorId(b.body.id);
  t.ok(aId < bId, 'A took the lower id');

  const got = await sse.waitFor(2, 5000);
  t.same(
    got.map((m) => [m.id, m.data]),
    [
      [aRes.id, '"A"'],
      [b.body.id, '"B"'],
    ],
    'both delivered, in feed order',
  );
  t.same(
    (await feedRows(db)).map((r) => r.cursor),
    [aRes.id, b.body.id],
    'the SSE order is the table order by (txid, id)',
  );
});

t.test('a transaction that got its xid early but inserted late orders by txid, not by id', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl);
  const db = sqlClient(t, dbUrl);
  const sse = await openSse(t, `${server.url}/v1/streams/x/events`);
  let go!: () => void;
  const mayInsert = new Promise<void>((r) => (go = r));
  let hasXid!: () => void;
  const xidTaken = new Promise<void>((r) => (hasXid = r));
  const early = db.transaction().execute(async (trx) => {
    await sql`select pg_current_xact_id()`.execute(trx); // lower txid, taken now
    hasXid();
    await mayInsert;
    return (await appendEvents(trx, [ev('x', 'early-xid')]))[0];
  });
  await xidTaken;
  const later = await publish(server.url, 'x', { data: 'later-xid' }); // lower id? no: it inserts first
  go();
  const e = await early;
  t.ok(cursorId(e.id) > cursorId(later.body.id), 'the early transaction has the higher id');
  const got = await sse.waitFor(2, 5000);
  t.same(
    got.map((m) => m.id),
    [e.id, later.body.id],
    'delivered by (txid, id): the early xid first, although its id is higher',
  );
});

t.test('rolled-back events are never delivered and wake nobody', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { pollIntervalMs: 60000 });
  const db = sqlClient(t, dbUrl);
  const sse = await openSse(t, `${server.url}/v1/streams/rb/events?from=earliest`);
  const notifiesBefore = server.feed.listener.stats.notifications;
  await db
    .transaction()
    .execute(async (trx) => {
      await appendEvents(trx, [ev('rb', 'ghost-1'), ev('rb', 'ghost-2')]);
      throw new Error('roll back');
    })
    .catch(() => {});
  // Nothing to wait for: a NOTIFY lands within milliseconds of its commit, so this is its chance.
  await sleep(300);
  t.equal(
    server.feed.listener.stats.notifications,
    notifiesBefore,
    'the rolled-back notify was never delivered',
  );
  const real = await publish(server.url, 'rb', { data: 'real' });
  const got = await sse.waitFor(1);
  t.same(
    got.map((m) => m.id),
    [real.body.id],
  );
  await sleep(200);
  t.equal(sse.received.length, 1, 'no ghost');
  t.same(
    (await feedRows(db)).map((r) => r.data),
    ['real'],
  );
});

t.test('concurrent publishes with the same key append exactly one event', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl);
  const db = sqlClient(t, dbUrl);
  const results = await Promise.all(
    Array.from({ length: 30 }, (_, i) => publish(server.url, 'k', { data: { attempt: i }, key: 'order-42' })),
  );
  const ids = new Set(results.map((r) => r.body.id));
  t.equal(ids.size, 1, 'every retry got the same id');
  t.equal(results.filter((r) => r.status === 201).length, 1, 'one 201');
  t.equal(
    results.filter((r) => r.status === 200 && r.body.duplicate === true).length,
    29,
    'the rest 200 duplicate',
  );
  t.equal((await feedRows(db)).length, 1, 'one row');
  // Also across separate transactions racing on the raw SQL path.
  const raced = await Promise.all(
    Array.from({ length: 10 }, () =>
      db.transaction().execute((trx) => appendEvents(trx, [{ ...ev('k', 'raw'), key: 'raw-key' }])),
    ),
  );
  t.equal(new Set(raced.map((r) => r[0].id)).size, 1);
  t.equal(raced.filter((r) => !r[0].duplicate).length, 1);
  t.equal((await feedRows(db)).length, 2);
});

t.test(
  'LISTEN connection terminated: the service reconnects and delivers what was committed meanwhile',
  async (t) => {
    const dbUrl = await testDatabase(t);
    // A long fallback poll: delivery below relies on the reconnect's catch-up read and the notify.
    const server = await startTestServer(t, dbUrl, { pollIntervalMs: 60000 });
    const db = sqlClient(t, dbUrl);
    const sse = await openSse(t, `${server.url}/v1/streams/l/events`);
    const pid = server.feed.listener.pid;
    t.ok(pid, 'listener has a backend pid');
    await sql`select pg_terminate_backend(${pid}::int)`.execute(db);
    // Committed by another writer (no local poke) while the listener is down: its notify is lost.
    const [during] = await appendEvents(db, [ev('l', 'while down')]);
    const got = await sse.waitFor(1, 8000);
    t.equal(got[0].id, during.id, 'delivered after the reconnect');
    t.ok(server.feed.listener.stats.reconnects >= 1, 'reconnected');
    t.not(server.feed.listener.pid, pid, 'on a new connection');
    const [after] = await appendEvents(db, [ev('l', 'after')]);
    t.equal((await sse.waitFor(2, 5000))[1].id, after.id, 'notifications flow again');
    const ready = await fetch(`${server.url}/readyz`);
    t.equal(ready.status, 200);
  },
);

t.test('group commit: concurrent publishes share statements, and one bad request fails alone', async (t) => {
  const dbUrl = await testDatabase(t);
  const db = sqlClient(t, dbUrl);
  const { migrate } = await import('../src/db/migrate.ts');
  await migrate(db);
  const batcher = new Batcher(db, { maxEvents: 1000, maxInflight: 1, write: appendCheckedEvents });
  const good = Array.from({ length: 50 }, (_, i) => batcher.publish([ev('g', i)]));
  // Invalid JSON text slips past no HTTP validation here: the database rejects it.
  const bad = batcher.publish([
    { stream: 'g', type: null, key: null, data: '{not json' } as CheckedEventInput,
  ]);
  const more = Array.from({ length: 50 }, (_, i) => batcher.publish([ev('g', 50 + i)]));
  const results = await Promise.allSettled([...good, bad, ...more]);
  t.equal(results.filter((r) => r.status === 'fulfilled').length, 100, 'the 100 good requests committed');
  t.equal(results[50].status, 'rejected', 'the bad one failed');
  t.ok(batcher.stats.statements < 100, `grouped into ${batcher.stats.statements} statements`);
  const rows = await feedRows(db);
  t.equal(rows.length, 100);
  t.same(
    rows.map((r) => r.data).sort((a, b) => Number(a) - Number(b)),
    Array.from({ length: 100 }, (_, i) => i),
  );
  await batcher.close();
});
