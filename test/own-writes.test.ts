// The tail read skips the rows of transactions this process committed through its group commit
// (src/feed/own-writes.ts) and the tailer puts those events in from memory. Checked against full
// reads of the same feed: interleaved writers, a transaction that commits after later ones, keyed
// groups (never held), small pages, a transaction recorded while a read was in flight, release, the
// cap; and end to end through the server.
import t from 'tap';
import { createDatabase } from '../src/db/database.ts';
import { type Cursor, START, compareCursors, horizonCursor, parseCursor } from '../src/feed/cursor.ts';
import type { CheckedEventInput, EventInput } from '../src/feed/event.ts';
import { OwnWrites } from '../src/feed/own-writes.ts';
import type { FeedEvent } from '../src/feed/event.ts';
import { appendEvents } from '../src/feed/queries/append.ts';
import { appendCheckedEvents } from '../src/feed/queries/append-checked.ts';
import { readTail } from '../src/feed/queries/read-tail.ts';
import { Tailer } from '../src/feed/tailer.ts';
import { openSse, publish, startTestServer, testDatabase, until } from './helpers.ts';

const log = { warn() {}, error() {}, info() {} };
const checked = (e: EventInput) => e as CheckedEventInput;
const ev = (stream: string, n: number, key: string | null = null): CheckedEventInput =>
  checked({ stream, type: n % 2 ? 'odd' : null, key, data: JSON.stringify({ n, s: 'é ✓ "q"\\ \u2028' }) });

async function open(t: { teardown(fn: () => unknown): void }) {
  const { db } = createDatabase({ url: await testDatabase(t), poolSize: 4, statementTimeoutMs: 5000, log });
  t.teardown(() => db.destroy());
  return db;
}
type Db = Awaited<ReturnType<typeof open>>;

/** What a reader sees of an event (everything the window keeps). */
const shape = (e: FeedEvent) => [e.txid, e.id, e.cursor, e.stream, e.type, e.key, e.data, e.ms];

/** Every finished event after `from`, read from the table alone (no held events); `suffix`: the
 * feed's tag as its cursors end (the tailer's). */
async function fullRead(db: Db, from: Cursor, suffix: string): Promise<FeedEvent[]> {
  const out: FeedEvent[] = [];
  let at = from;
  for (;;) {
    const page = await readTail(db, at, 1000, undefined, undefined, suffix);
    out.push(...page.events);
    if (page.events.length < 1000) return out;
    at = page.events[page.events.length - 1];
  }
}

t.test('a tailer with held events delivers exactly what the table holds, in feed order', async (t) => {
  const db = await open(t);
  const own = new OwnWrites(1000);
  const got: FeedEvent[] = [];
  // Pages of 3 rows: held events are put in across many full and partial pages.
  const tailer = new Tailer(db, {
    pageSize: 3,
    windowEvents: 1000,
    pollIntervalMs: 50,
    log,
    own,
    onEvents: (e) => got.push(...e),
  });
  await tailer.start();
  t.teardown(() => tailer.stop());
  const from = tailer.position;
  const write = (events: CheckedEventInput[]) => appendCheckedEvents(db, events, own);

  // A transaction elsewhere takes ids first and commits last: the horizon holds every later
  // commit (ours included) back until it ends.
  let release!: () => void;
  let started!: () => void;
  const held = new Promise<void>((r) => (release = r));
  const inserted = new Promise<void>((r) => (started = r));
  const late = db.transaction().execute(async (trx) => {
    await appendEvents(trx, [ev('other', 100), ev('other', 101)]);
    started();
    await held;
  });
  await inserted;
  await write([ev('a', 1), ev('a', 2), ev('b', 3), ev('a', 4)]);
  await appendEvents(db, [ev('other', 102)]);
  await write([ev('c', 5)]);
  await write([ev('a', 6, 'k1'), ev('a', 7)]); // keys: written by append_unchecked, never held
  await Promise.all([
    write([ev('d', 8), ev('d', 9)]),
    appendEvents(db, [ev('other', 103)]),
    write([ev('e', 10)]),
  ]);
  t.equal(own.size, 8, 'the keyless groups are held');
  tailer.wake();
  await tailer.settled(2000);
  t.equal(got.length, 0, 'nothing is delivered past a transaction that may still commit');
  release();
  await late;
  await write([ev('f', 11), ev('f', 12), ev('f', 13), ev('f', 14), ev('f', 15)]);
  const all = await fullRead(db, from, tailer.history.suffix);
  t.equal(all.length, 2 + 4 + 1 + 1 + 2 + 2 + 1 + 1 + 5, 'every event is in the table');
  await until(
    async () => {
      tailer.wake();
      return got.length >= all.length;
    },
    10000,
    'the tailer to deliver every event',
  );
  t.same(got.map(shape), all.map(shape), 'the same events, with the same contents, in the same order');
  await until(() => own.size === 0, 5000, 'the held events to be released');
});

t.test('a transaction recorded while a read was in flight comes from the table, once', async (t) => {
  const db = await open(t);
  const own = new OwnWrites(1000);
  const before = new OwnWrites(1000);
  await appendCheckedEvents(db, [ev('a', 1)], own);
  // Written and committed, but recorded only after the next read was sent (a late record).
  const late = [ev('b', 2), ev('b', 3)];
  await appendCheckedEvents(db, late, before);
  const page = await readTail(db, START, 100, own);
  t.same(
    page.events.map((e) => e.data),
    late.map((e) => e.data),
    'the page skips the recorded transaction and returns the other one',
  );
  const [tx] = before.txids();
  const w = before.between([tx], START, horizonCursor(page.horizon));
  own.record(
    tx,
    w.map((e) => e.id),
    late,
    w[0].ms,
  );
  const tail = horizonCursor(page.horizon);
  const held = own.between(page.skipped, START, tail);
  t.same(
    held.map((e) => JSON.parse(e.data).n),
    [1],
    'only the transaction the read skipped is put in from memory',
  );
  own.release(tail);
  t.equal(own.size, 0, 'both are released once the tail is past them');
});

t.test('a group without keys is written in one row by append_plain: ids in input order', async (t) => {
  const db = await open(t);
  const events = Array.from({ length: 50 }, (_, i) => ev(`s${i % 3}`, i));
  // Another writer's concurrent statements interleave their ids with ours.
  const [mine] = await Promise.all([
    appendCheckedEvents(db, events),
    ...Array.from({ length: 4 }, (_, i) => appendEvents(db, [ev('other', 100 + i)])),
  ]);
  t.equal(new Set(mine.map((r) => r.id.split('-')[0])).size, 1, 'one transaction');
  t.ok(
    mine.every((r, i) => !r.duplicate && r.stream === events[i].stream),
    'one result per event, none a duplicate',
  );
  const byCursor = new Map((await fullRead(db, START, '')).map((e) => [e.cursor, e]));
  t.same(
    mine.map((r) => byCursor.get(r.id)?.data),
    events.map((e) => e.data),
    "each result's cursor is the row holding that event",
  );
  t.same(await appendCheckedEvents(db, []), [], 'nothing to write');
});

t.test('past maxEvents held, commits are not recorded and are read from the table', async (t) => {
  const db = await open(t);
  const own = new OwnWrites(2);
  const events = [ev('a', 1), ev('a', 2), ev('a', 3)];
  await appendCheckedEvents(db, events, own);
  t.equal(own.size, 0, 'nothing held');
  t.equal(own.stats.skipped, 3, 'counted as skipped');
  const page = await readTail(db, START, 100, own);
  t.same(page.skipped, [], 'the read skips nothing');
  t.same(
    page.events.map((e) => e.data),
    events.map((e) => e.data),
  );
});

t.test(
  'through the server: published events reach subscribers whole, and the held set empties',
  async (t) => {
    const server = await startTestServer(t, await testDatabase(t));
    const sse = await openSse(t, `${server.url}/v1/streams/own/events?after=0-0`);
    // Concurrent publishes (grouped into shared statements); ten carry keys, five of them repeating
    // an earlier key (groups with keys are not held).
    const sent = Array.from({ length: 40 }, (_, i) => ({
      type: 'n',
      ...(i >= 25 ? { key: `k${i % 5}` } : {}),
      data: { i, t: 'ü' },
    }));
    const answers = await Promise.all(sent.map((body) => publish(server.url, 'own', body)));
    t.ok(
      answers.every((r) => r.status === 200 || r.status === 201),
      'every publish is accepted',
    );
    const written = new Map<string, unknown>();
    answers.forEach((r, i) => {
      if (!r.body.duplicate) written.set(r.body.id, sent[i].data);
    });
    t.equal(written.size, 30, 'one event per publish without a key or with a new key');
    t.ok(server.feed.own.stats.recorded > 0, 'the group commit held events');
    const frames = await sse.waitFor(30);
    t.same(
      frames.map((f) => [f.id, f.event, JSON.parse(f.data!)]),
      [...written]
        .map(([id, data]) => [id, 'n', data])
        .sort((a, b) => compareCursors(parse(a[0]), parse(b[0]))),
      'each event arrived once, in feed order, with its id, type and data',
    );
    await until(() => server.feed.own.size === 0, 5000, 'the held events to be released');
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    const held = Number(/^commitfeed_tailer_own_events_total (\d+)$/m.exec(metrics)?.[1]);
    t.equal(held, server.feed.own.stats.recorded, '/metrics counts the events taken from memory');
  },
);

const parse = (c: unknown) => {
  const { txid, id } = parseCursor(String(c))!;
  return { txid, id };
};
