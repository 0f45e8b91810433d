// When the group commit starts a second statement beside one in flight (src/commit/batcher.ts,
// worthStarting): a lone request goes at once beside a statement of one (light load), but beside a
// statement of ten, single requests wait until ten are queued, or until the statement in flight
// ends, rather than going as groups of one. Real statements on a real database; a gate holds each
// statement before it is sent so that what is in flight at each moment is known.
import t from 'tap';
import { Batcher } from '../src/commit/batcher.ts';
import type { CheckedEventInput } from '../src/feed/event.ts';
import { appendCheckedEvents } from '../src/feed/queries/append-checked.ts';
import { sqlClient, testDatabase, until } from './helpers.ts';

const ev = (n: number) =>
  ({ stream: 'b', type: null, key: null, data: JSON.stringify({ n }) }) as CheckedEventInput;

/** A batcher whose every statement waits for release() before it is sent; `groups` lists their sizes. */
async function gated(t: { teardown(fn: () => unknown): void }) {
  const db = sqlClient(t, await testDatabase(t));
  const groups: number[] = [];
  const gates: (() => void)[] = [];
  const batcher = new Batcher(db, {
    maxEvents: 1000,
    write: async (conn, items: readonly CheckedEventInput[]) => {
      groups.push(items.length);
      await new Promise<void>((r) => gates.push(r));
      return appendCheckedEvents(conn, items);
    },
  });
  const release = () => gates.shift()?.();
  return { batcher, groups, release, pending: () => gates.length };
}

t.test('light load: a lone request goes at once beside a statement of one', async (t) => {
  const { batcher, groups, release, pending } = await gated(t);
  const a = batcher.publish([ev(1)]);
  await until(() => pending() === 1, 5000, 'the first statement');
  const b = batcher.publish([ev(2)]);
  await until(() => pending() === 2, 5000, 'a second statement beside it');
  t.same(groups, [1, 1], 'two statements of one, both in flight');
  release();
  release();
  await Promise.all([a, b]);
});

t.test('beside a statement of ten, single requests wait for ten or for its end', async (t) => {
  const { batcher, groups, release, pending } = await gated(t);
  const first = batcher.publish(Array.from({ length: 10 }, (_, i) => ev(i)));
  await until(() => pending() === 1, 5000, 'the statement of ten');
  const singles = Array.from({ length: 9 }, (_, i) => batcher.publish([ev(100 + i)]));
  await new Promise((r) => setImmediate(r));
  t.same(groups, [10], 'nine single requests wait');
  const tenth = batcher.publish([ev(109)]);
  await until(() => pending() === 2, 5000, 'the second statement');
  t.same(groups, [10, 10], 'the tenth starts them as one statement of ten');
  const late = Array.from({ length: 3 }, (_, i) => batcher.publish([ev(200 + i)]));
  await new Promise((r) => setImmediate(r));
  t.same(groups, [10, 10], 'with two in flight, nothing more starts');
  release();
  await first;
  await new Promise((r) => setImmediate(r));
  t.same(groups, [10, 10], 'beside the other statement of ten, the three still wait');
  release();
  await until(() => pending() === 1, 5000, 'the waiting three to start');
  t.same(groups, [10, 10, 3], 'once nothing is in flight, the three go together');
  release();
  await Promise.all([...singles, tenth, ...late]);
  t.equal(batcher.stats.events, 23, 'every event written');
});
