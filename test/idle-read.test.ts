// While nobody in the process waits for events, the tailer defers a commit's read (IDLE_READ_DELAY)
// so one read covers many commits; someone who starts waiting (a subscriber, a long-poll, a queue
// listener) makes it read at once. Nothing is lost or reordered either way: checked against a full
// read of the table.
import t from 'tap';
import { createDatabase } from '../src/db/database.ts';
import type { CheckedEventInput } from '../src/feed/event.ts';
import { Feed } from '../src/feed/feed.ts';
import type { FeedEvent } from '../src/feed/event.ts';
import { readTail } from '../src/feed/queries/read-tail.ts';
import type { Sink } from '../src/feed/subscriber.ts';
import { testDatabase, until } from './helpers.ts';

const log = { warn() {}, error() {}, info() {} };
const ev = (stream: string, n: number) =>
  ({ stream, type: null, key: null, data: JSON.stringify({ n }) }) as CheckedEventInput;

/** A Feed on its own database; `idleReadDelayMs` long enough that the deferral is unmistakable. */
async function openFeed(t: { teardown(fn: () => unknown): void }, idleReadDelayMs: number) {
  const url = await testDatabase(t);
  const { db, sessions } = createDatabase({ url, poolSize: 4, statementTimeoutMs: 5000, log });
  const feed = new Feed({
    db,
    databaseUrl: url,
    ownSessions: sessions, // our commits' NOTIFYs are not wakes of their own
    batchMaxEvents: 100,
    pageSize: 1000,
    windowEvents: 10000,
    pollIntervalMs: 60_000, // no fallback poll during the test: every read is a commit's
    idleReadDelayMs,
    heartbeatMs: 60_000,
    sseRetryMs: 1000,
    log,
  });
  await feed.start();
  t.teardown(async () => {
    await feed.stop(1000);
    await db.destroy();
  });
  return { db, feed };
}

/** A sink that keeps what it is sent. */
function memorySink() {
  let text = '';
  const sink: Sink = {
    write(chunk) {
      text += chunk;
      return true;
    },
    drained: () => Promise.resolve(),
    end(chunk) {
      if (chunk) text += chunk;
    },
  };
  return { sink, text: () => text };
}

const shape = (e: FeedEvent) => [e.txid, e.id, e.stream, e.data];

t.test(
  'with nobody waiting, many commits cost one read, and it delivers them all in feed order',
  async (t) => {
    const delay = 400;
    const { db, feed } = await openFeed(t, delay);
    const got: FeedEvent[] = [];
    feed.watch((e) => got.push(...e));
    const from = feed.tailer.position;
    const reads0 = feed.tailer.stats.reads;
    const deferred0 = feed.tailer.stats.deferredWakes; // the listener's wake at start may be one
    const started = Date.now();
    await feed.batcher.publish([ev('s0', 0)]);
    t.equal(got.length, 0, 'nothing read right after the first commit: the read waits for the delay');
    // 19 more group commits in a row, each waking the tailer.
    for (let i = 1; i < 20; i++) await feed.batcher.publish([ev(`s${i % 3}`, i)]);
    const elapsed = Date.now() - started;
    t.equal(feed.tailer.stats.deferredWakes - deferred0, 20, 'every commit wake was deferred');
    await until(() => got.length === 20, 3000, 'the deferred reads deliver every event');
    // One read per delay that passed while committing, and the last one (20 without deferral).
    const reads = feed.tailer.stats.reads - reads0;
    t.ok(reads <= Math.ceil(elapsed / delay) + 1, `${reads} reads for 20 commits in ${elapsed} ms`);
    t.ok(feed.tailer.stats.deferredReads >= 1, 'the deferral timer started the reads');
    const table = (await readTail(db, from, 1000)).events;
    t.same(got.map(shape), table.map(shape), 'exactly what the table holds, in feed order');
  },
);

t.test(
  'a subscriber, a long-poll or a listener that starts waiting makes a deferred read run at once',
  async (t) => {
    // The longest delay allowed: a read within it is the hurry's, and the counters say so.
    const { feed } = await openFeed(t, 1000);
    const cases: [string, (done: () => void) => () => void][] = [
      [
        'subscriber',
        (done) => {
          const mem = memorySink();
          const sub = feed.hub.subscribe(['w'], feed.tailer.position, mem.sink);
          const check = setInterval(() => mem.text().includes('"n":1') && done(), 5);
          return () => {
            clearInterval(check);
            feed.hub.unsubscribe(sub);
          };
        },
      ],
      [
        'long-poll',
        (done) => {
          const abort = new AbortController();
          void feed.hub.waitForEvents(['w'], 5000, abort.signal).then(done);
          return () => abort.abort();
        },
      ],
      ['listener', (done) => feed.hub.listen('w', () => done())],
    ];
    for (const [name, wait] of cases) {
      const deferredReads = feed.tailer.stats.deferredReads;
      const deferredWakes = feed.tailer.stats.deferredWakes;
      const before = feed.tailer.position;
      await feed.batcher.publish([ev('w', 1)]);
      t.equal(feed.tailer.stats.deferredWakes, deferredWakes + 1, `${name}: the commit's wake was deferred`);
      t.same(feed.tailer.position, before, `${name}: not read yet`);
      let arrived = false;
      const stop = wait(() => {
        arrived = true;
      });
      try {
        await until(() => arrived, 3000, `${name}: the event arrives`);
      } finally {
        stop();
      }
      t.equal(
        feed.tailer.stats.deferredReads,
        deferredReads,
        `${name}: read at once, not by the deferral timer`,
      );
    }
  },
);

t.test('while someone waits, no commit is deferred', async (t) => {
  const { feed } = await openFeed(t, 1000);
  const mem = memorySink();
  const sub = feed.hub.subscribe(['x'], feed.tailer.position, mem.sink);
  t.teardown(() => feed.hub.unsubscribe(sub));
  const deferred0 = feed.tailer.stats.deferredWakes; // the listener's wake at start may be one
  for (let i = 0; i < 5; i++) await feed.batcher.publish([ev('y', i)]);
  await feed.batcher.publish([ev('x', 7)]);
  await until(() => mem.text().includes('"n":7'), 3000, 'the subscriber gets its event');
  t.equal(feed.tailer.stats.deferredWakes, deferred0, 'no wake was deferred');
  feed.hub.unsubscribe(sub);
  await feed.batcher.publish([ev('y', 8)]);
  t.equal(
    feed.tailer.stats.deferredWakes,
    deferred0 + 1,
    'once the subscriber left, the next commit is deferred',
  );
});
