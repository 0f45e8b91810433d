import t from 'tap';
import { Loop } from '../src/flows/loop.ts';
import { within } from './helpers.ts';

/** A promise and the function that resolves it. */
function signal(): { promise: Promise<void>; fire: () => void } {
  let fire = () => {};
  const promise = new Promise<void>((r) => {
    fire = r;
  });
  return { promise, fire };
}

t.test(
  'failed passes back off, doubling up to the cap; a good pass resets it; null sleeps not at all',
  async (t) => {
    // The loop's sleeps are recorded and cut to 0 ms, so the test sees every wait it asked for without
    // spending them (the 10 s timers of within() are real).
    const realSetTimeout = globalThis.setTimeout;
    const waits: number[] = [];
    globalThis.setTimeout = ((fn: () => void, ms?: number) => {
      if (ms !== undefined && ms >= 10_000) return realSetTimeout(fn, ms);
      waits.push(ms ?? 0);
      return realSetTimeout(fn, 0);
    }) as typeof setTimeout;
    t.teardown(() => {
      globalThis.setTimeout = realSetTimeout;
    });
    // fail ×4, ok (5 ms), ok (at once), fail, then park.
    const script: (number | null | 'fail')[] = ['fail', 'fail', 'fail', 'fail', 5, null, 'fail'];
    const errors: string[] = [];
    const parked = signal();
    const release = signal();
    let passes = 0;
    const loop = new Loop({
      pass: async () => {
        const step = script[passes++];
        if (step === undefined) {
          parked.fire();
          await release.promise;
          return 0;
        }
        if (step === 'fail') throw new Error(`pass ${passes}`);
        return step;
      },
      onError: (err) => errors.push(err.message),
      intervalMs: 10,
      maxBackoffMs: 40,
    });
    loop.start();
    await within(parked.promise, 10_000, 'the scripted passes');
    const stopped = loop.stop();
    t.ok(loop.stopping, 'a pass in progress sees the stop');
    release.fire();
    await within(stopped, 10_000, 'stop() after the pass in progress');
    t.same(
      waits,
      [10, 20, 40, 40, 5, 10],
      'waits: backoff 10, 20, 40, 40 (cap), 5 as asked, none for null, 10 again',
    );
    t.same(errors, ['pass 1', 'pass 2', 'pass 3', 'pass 4', 'pass 7'], 'every failure reaches onError');
    t.equal(passes, script.length + 1, 'no pass after stop()');
  },
);

t.test('wake() cuts a sleep short; stop() ends a sleeping loop; start() again after stop()', async (t) => {
  let passes = 0;
  let ran = signal();
  const loop = new Loop({
    pass: async () => {
      passes++;
      ran.fire();
      return 3_600_000;
    },
    onError: () => t.fail('no pass fails'),
    intervalMs: 10,
    maxBackoffMs: 10,
  });
  t.notOk(loop.stopping, 'not stopping before it ever started');
  loop.start();
  loop.start();
  await within(ran.promise, 10_000, 'the first pass');
  ran = signal();
  loop.wake();
  await within(ran.promise, 10_000, 'the pass wake() asked for, not the hour-long sleep');
  t.equal(passes, 2, 'one pass per wake, and a second start() did nothing');
  await within(loop.stop(), 10_000, 'stop() of a sleeping loop');
  t.ok(loop.stopping);
  t.notOk(loop.running);
  t.equal(passes, 2, 'stop() ran no pass');
  ran = signal();
  loop.start();
  await within(ran.promise, 10_000, 'a pass after starting again');
  t.notOk(loop.stopping);
  await within(loop.stop(), 10_000, 'the second stop()');
  t.equal(passes, 3);
});
