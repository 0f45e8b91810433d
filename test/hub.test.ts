// The hub's fan-out and its slow-reader rules without a database or sockets (src/feed/hub.ts,
// src/feed/slow-readers.ts): a subscriber closed while a page is fanned out is handed nothing more; a
// listener that throws part-way leaves no frames gathered and unwritten; and each drop rule (timeout,
// bytes in flight with too little progress, the total) picks the subscribers it names, no others.
import t, { type Test } from 'tap';
import type { Cursor } from '../src/feed/cursor.ts';
import { type EventFields, type FeedEvent, feedEvent } from '../src/feed/event.ts';
import { Hub } from '../src/feed/hub.ts';
import type { Sink, Subscriber } from '../src/feed/subscriber.ts';
import type { Tailer } from '../src/feed/tailer.ts';

const START: Cursor = { txid: 100, id: 0 };

/** A tailer at START: a subscriber from there is live at once, and never reads a page. */
const tailer = {
  position: START,
  hurry() {},
  readFrames: () => Promise.reject(new Error('no catch-up here')),
} as unknown as Tailer;

function hub(t: Test, limits: Partial<ConstructorParameters<typeof Hub>[1]> = {}): Hub {
  const h = new Hub(tailer, {
    pageSize: 100,
    heartbeatMs: 60_000,
    sseRetryMs: 100,
    log: { warn() {} },
    ...limits,
  });
  t.teardown(() => h.close());
  return h;
}

let seq = 0;
const event = (stream: string): FeedEvent =>
  feedEvent(String(START.txid + 1), String(++seq), { stream, data: `{"n":${seq}}` } as EventFields, 0);

/** A sink that records what it is handed, and after `close` whether anything still came. */
class RecordingSink implements Sink {
  written: string[] = [];
  afterEnd: string[] = [];
  ended = false;
  resets = 0;
  full = false;
  /** What the sweep sees of its socket (see Sink.socketBytes). */
  bytes = { unsent: 0, handed: 0 };
  write(chunk: string | Uint8Array): boolean {
    (this.ended ? this.afterEnd : this.written).push(Buffer.from(chunk).toString());
    return !this.full;
  }
  drained(): Promise<void> {
    return new Promise(() => {});
  }
  end(): void {
    this.ended = true;
  }
  reset(): void {
    this.resets++;
    this.ended = true;
  }
  socketBytes() {
    return this.bytes;
  }
}

const ids = (sink: RecordingSink) => sink.written.join('').match(/^id: \S+/gm) ?? [];

t.test('a subscriber closed while a page is fanned out is handed nothing more', async (t) => {
  const h = hub(t);
  const a = new RecordingSink();
  const b = new RecordingSink();
  const subA = h.subscribe(['orders'], START, a);
  h.subscribe(['orders'], START, b);
  // A listener that ends A part-way through the page (as a drop or a client leaving would).
  h.listen('other', () => {
    h.unsubscribe(subA);
    a.end();
  });
  const page = [event('orders'), event('other'), event('orders')];
  h.onEvents(page);
  t.same(a.written, [], 'A was gathered a frame before it closed, and is handed none of it');
  t.same(a.afterEnd, [], 'nothing written after its end');
  t.same(ids(b), [`id: ${page[0]!.cursor}`, `id: ${page[2]!.cursor}`], 'B gets the whole page');
});

t.test(
  'a listener that throws part-way: the frames gathered are written, and later pages flow',
  async (t) => {
    const h = hub(t);
    const sink = new RecordingSink();
    h.subscribe(['orders'], START, sink);
    let throwing = true;
    h.listen('other', () => {
      if (throwing) throw new Error('fan-out failed');
    });
    const first = [event('orders'), event('other')];
    t.throws(() => h.onEvents(first), /fan-out failed/, 'the error still reaches the tailer');
    t.same(ids(sink), [`id: ${first[0]!.cursor}`], 'the frame gathered before the throw is written');
    throwing = false;
    const next = [event('orders')];
    h.onEvents(next);
    t.same(ids(sink), [`id: ${first[0]!.cursor}`, `id: ${next[0]!.cursor}`], 'and the next page too');
  },
);

/** A subscriber with `unsent` bytes in flight, blocked (a full socket) since `blockedMs` ago (0: not). */
function add(h: Hub, blockedMs: number, unsent: number): { sub: Subscriber; sink: RecordingSink } {
  const sink = new RecordingSink();
  sink.bytes = { unsent, handed: 0 };
  const sub = h.subscribe(['orders'], START, sink);
  if (blockedMs > 0) sub.blockedSince = Date.now() - blockedMs;
  return { sub, sink };
}

/** The client acknowledged `kib` more KiB since the last sweep. */
const acks = (s: { sink: RecordingSink }, kib: number) => {
  s.sink.bytes = { ...s.sink.bytes, handed: s.sink.bytes.handed + kib * 1024 };
};

const KiB = 1024;
const pause = () => new Promise((r) => setTimeout(r, 50));

t.test('the slow-reader rules: timeout, bytes in flight without progress, the total', async (t) => {
  const h = hub(t, {
    slowSubscriberMaxMs: 60_000, // the interval's own sweeps stay out of the way
    sseMaxInFlightBytes: 100 * KiB,
    sseMaxTotalInFlightBytes: 400 * KiB, // drops over 3/4 of it: 300 KiB
  });
  const stuck = add(h, 61_000, 10 * KiB); // full for longer than the timeout
  const fast = add(h, 0, 110 * KiB); // over the cap, but it acknowledges a lot per second
  const stalled = add(h, 0, 110 * KiB); // over the cap and not moving
  const calm = add(h, 0, 50 * KiB);
  await h.slow.sweep(); // the hub's first sweep: no rate yet, only the timeout applies
  t.same(h.slow.stats.dropped, { timeout: 1, in_flight: 0, total: 0 }, 'the stuck one, at once');
  t.equal(stuck.sink.resets, 1, 'with a reset');
  t.ok(stuck.sub.closed, 'and out of the hub');
  t.equal(h.slow.stats.inFlight, 270 * KiB, "the others' bytes in flight are counted");

  await pause();
  acks(fast, 10_000); // ~10 MiB acknowledged in 50 ms
  acks(calm, 200);
  await h.slow.sweep();
  t.same(h.slow.stats.dropped, { timeout: 1, in_flight: 1, total: 0 }, 'the stalled one over the cap');
  t.equal(stalled.sink.resets, 1);
  t.equal(fast.sink.resets, 0, 'not the fast reader with as much in flight');
  t.equal(h.slow.stats.inFlight, 160 * KiB);

  // A slow one's allowance follows its pace (a quarter of the cap at least): not reading, it goes
  // once it has that much in flight.
  const a = add(h, 0, 30 * KiB);
  const b = add(h, 0, 20 * KiB);
  const c = add(h, 0, 80 * KiB);
  await pause();
  for (const [s, kib] of [
    [fast, 10_000],
    [calm, 200],
  ] as const)
    acks(s, kib);
  await h.slow.sweep(); // 290 KiB: under 3/4 of the total, and new ones get the benefit of the doubt
  t.same(h.slow.stats.dropped, { timeout: 1, in_flight: 1, total: 0 }, 'nobody over the total yet');
  await pause();
  for (const [s, kib] of [
    [fast, 10_000],
    [calm, 200],
    [b, 200],
  ] as const)
    acks(s, kib);
  c.sink.bytes = { ...c.sink.bytes, unsent: 95 * KiB }; // given more, took nothing
  await h.slow.sweep(); // 305 KiB
  t.same(
    h.slow.stats.dropped,
    { timeout: 1, in_flight: 3, total: 0 },
    'the two not reading had their allowance in flight (a quarter of the cap once they showed no pace)',
  );
  t.same(
    [a, b, c, fast, calm].map((s) => s.sink.resets),
    [1, 0, 1, 0, 0],
    'both that were not reading',
  );
  t.equal(h.slow.stats.inFlight, 180 * KiB);

  // Over 3/4 of the total, all of them reading: the most in flight, until under it.
  const e = add(h, 0, 150 * KiB);
  await pause();
  for (const [s, kib] of [
    [fast, 10_000],
    [calm, 200],
    [b, 200],
  ] as const)
    acks(s, kib);
  await h.slow.sweep(); // 330 KiB
  t.same(
    [fast, calm, b, e].map((s) => s.sink.resets),
    [0, 0, 0, 1],
    'then the most in flight',
  );
  t.equal(h.slow.stats.inFlight, 180 * KiB);
  t.equal(h.stats.dropped, 5, "the hub's count");
  t.equal(h.subscriberCount, 3);
});

t.test('byte budgets: writes stop at the budget and resume when a sweep grants more', async (t) => {
  const h = hub(t, {
    slowSubscriberMaxMs: 60_000,
    sseMaxInFlightBytes: 100 * KiB,
    sseMaxTotalInFlightBytes: 1000 * KiB,
  });
  const s = add(h, 0, 0);
  t.equal(s.sub.budget, 100 * KiB, 'a new subscriber may be written SSE_MAX_IN_FLIGHT_BYTES');
  s.sink.bytes = { unsent: 50 * KiB, handed: 0 };
  await h.slow.sweep();
  t.equal(s.sub.budget, 50 * KiB, 'less what it has in flight');
  t.ok(h.slow.admit(s.sub, 30 * KiB), 'a write within its budget');
  t.ok(h.slow.admit(s.sub, 30 * KiB), 'the write that crosses it (one write over at most)');
  t.notOk(h.slow.admit(s.sub, 1), 'then none');
  t.ok(s.sub.gatedSince > 0, 'it is on hold');
  let granted = false;
  const grant = h.slow.granted(s.sub).then(() => {
    granted = true;
  });
  await pause();
  s.sink.bytes = { unsent: 110 * KiB, handed: 0 };
  await h.slow.sweep(); // nothing acknowledged: over its budget, still on hold... and over the cap
  t.equal(s.sink.resets, 1, 'at the cap without moving: dropped');
  await grant;
  t.ok(granted, 'and its wait ends');

  const f = add(h, 0, 0);
  await pause();
  f.sink.bytes = { unsent: 20 * KiB, handed: 2000 * KiB }; // 2 MiB acknowledged in ~50 ms
  await h.slow.sweep();
  t.ok(
    f.sub.budget > 1000 * KiB,
    `a fast reader's budget follows its pace (${Math.round(f.sub.budget / KiB)} KiB)`,
  );

  // All connections together: past the total, every write waits for the next sweep.
  const g = add(h, 0, 0);
  g.sub.budget = Number.POSITIVE_INFINITY;
  let n = 0;
  while (h.slow.admit(g.sub, 100 * KiB)) n++;
  t.equal(n, 10, 'the total stops writes at SSE_MAX_TOTAL_IN_FLIGHT_BYTES');
  t.notOk(h.slow.admit(f.sub, 1), 'for every subscriber');
});
