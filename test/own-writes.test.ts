// The tail read does not send back the contents of events this process committed through its group
// commit (src/feed/own-writes.ts): those rows come back as position and time only and are completed
// from memory. Checked against a full read of the same feed: interleaved writers, a transaction
// that commits after later ones, keys and duplicates, paging, release, the cap, and the
// "not held" fallback; and end to end through the server.
import { CompiledQuery } from 'kysely';
import t from 'tap';
import { createDatabase } from '../src/db/database.ts';
import { START, compareCursors } from '../src/feed/cursor.ts';
import type { CheckedEventInput, EventInput } from '../src/feed/event.ts';
import { OwnWrites } from '../src/feed/own-writes.ts';
import {
  type FeedEvent,
  TAIL_SQL,
  appendCheckedEvents,
  appendEvents,
  readTail,
} from '../src/feed/queries.ts';
import { openSse, publish, startTestServer, testDatabase, until } from './helpers.ts';

const log = { warn() {}, error() {} };
const checked = (e: EventInput) => e as CheckedEventInput;
const ev = (stream: string, n: number, key: string | null = null): CheckedEventInput =>
  checked({ stream, type: n % 2 ? 'odd' : null, key, data: JSON.stringify({ n, s: 'é ✓ "q"\\ \u2028' }) });

async function open(t: { teardown(fn: () => unknown): void }) {
  const { db } = createDatabase({ url: await testDatabase(t), poolSize: 4, statementTimeoutMs: 5000, log });
  t.teardown(() => db.destroy());
  return db;
}

/** What a reader sees of an event (everything the window keeps). */
const shape = (e: FeedEvent) => [e.txid, e.id, e.cursor, e.stream, e.type, e.key, e.data, e.ms];

t.test('own rows come back without contents and complete to exactly what a full read returns', async (t) => {
  const db = await open(t);
  const own = new OwnWrites(1000);
  const write = async (events: CheckedEventInput[]) => {
    const results = await appendCheckedEvents(db, events);
    own.record(events, results);
    return results;
  };
  // A transaction elsewhere takes ids first and commits last (out of order), around our commits.
  const late = await db.transaction().execute(async (trx) => {
    await appendEvents(trx, [ev('other', 100), ev('other', 101)]);
    await write([ev('a', 1), ev('b', 2, 'k1'), ev('a', 3)]);
    await appendEvents(db, [ev('other', 102)]);
    // A duplicate key (no row) and a key repeated within the call, beside new events.
    const dup = await write([ev('b', 4, 'k1'), ev('a', 5, 'k2'), ev('a', 6, 'k2'), ev('c', 7)]);
    return dup;
  });
  t.same(
    late.map((r) => r.duplicate),
    [true, false, true, false],
    'the duplicate and the repeat wrote no rows',
  );
  await write([ev('c', 8)]);
  t.equal(own.size, 6, 'every new row of ours is held, no duplicates');

  // The statement itself leaves our rows' contents out (not only the completion).
  const { rows } = await db.executeQuery<{ txid: string; stream: string | null; data: string | null }>(
    CompiledQuery.raw(TAIL_SQL, ['0', 0, 100, own.txids()]),
  );
  const ownRows = rows.filter((r) => own.get(r.txid, Number((r as unknown as { id: string }).id)));
  t.equal(ownRows.length, 6, 'the read returns all six of our rows');
  t.ok(
    ownRows.every((r) => r.stream === null && r.data === null),
    'our rows come back as position and time only',
  );
  t.equal(rows.filter((r) => r.stream !== null).length, 3, "the other writer's rows come back whole");

  const full = await readTail(db, START, 100);
  const mine = await readTail(db, START, 100, own);
  t.equal(full.events.length, 9);
  t.same(mine.events.map(shape), full.events.map(shape), 'the same events, in the same order');

  // Page by page with release after each page, as the tailer does.
  let at = START;
  const paged: FeedEvent[] = [];
  for (let i = 0; i < 20; i++) {
    const page = await readTail(db, at, 2, own);
    paged.push(...page.events);
    at = page.events.length === 2 ? page.events[1] : { txid: page.horizon, id: 0 };
    own.release(at);
    if (page.events.length < 2) break;
  }
  t.same(paged.map(shape), full.events.map(shape), 'paged reads with release: the same events');
  t.equal(own.size, 0, 'everything is released once the tail is past it');
  t.ok(compareCursors(at, full.events[8]) > 0, 'the tail is past the last event');
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
  const full = await readTail(db, START, 100);
  const byCursor = new Map(full.events.map((e) => [e.cursor, e]));
  t.same(
    mine.map((r) => byCursor.get(r.id)?.data),
    events.map((e) => e.data),
    "each result's cursor is the row holding that event",
  );
  t.same(await appendCheckedEvents(db, []), [], 'nothing to write');
});

t.test('a row that comes back without contents but is not held makes the page be read in full', async (t) => {
  const db = await open(t);
  const own = new OwnWrites(1000);
  const events = [ev('a', 1), ev('a', 2)];
  const results = await appendCheckedEvents(db, events);
  // Hold the transaction with only its first event (an inconsistency that must not lose contents).
  own.record([events[0]], [results[0]]);
  const page = await readTail(db, START, 100, own);
  t.same(
    page.events.map((e) => e.data),
    events.map((e) => e.data),
    'both events carry their contents',
  );
});

t.test('past maxEvents held, commits are not recorded and are read back whole', async (t) => {
  const db = await open(t);
  const own = new OwnWrites(2);
  const events = [ev('a', 1), ev('a', 2), ev('a', 3)];
  own.record(events, await appendCheckedEvents(db, events));
  t.equal(own.size, 0, 'nothing held');
  t.equal(own.stats.skipped, 3, 'counted as skipped');
  const page = await readTail(db, START, 100, own);
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
    // Concurrent publishes (grouped into shared statements), five of them repeating an earlier key.
    const sent = Array.from({ length: 30 }, (_, i) => ({
      type: 'n',
      key: `k${i % 25}`,
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
    t.equal(written.size, 25, 'one event per key was written');
    t.ok(server.feed.own.stats.recorded >= 25, 'the group commit recorded its events');
    const frames = await sse.waitFor(25);
    t.same(
      frames.map((f) => [f.id, f.event, JSON.parse(f.data!)]),
      [...written]
        .map(([id, data]) => [id, 'n', data])
        .sort((a, b) => compareCursors(parse(a[0]), parse(b[0]))),
      'each event arrived once, in feed order, with its id, type and data',
    );
    await until(() => server.feed.own.size === 0, 5000, 'the held events to be released');
  },
);

const parse = (c: unknown) => {
  const [txid, id] = String(c).split('-').map(Number);
  return { txid, id };
};
