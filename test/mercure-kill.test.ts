// Resume across a replica KILL: a Mercure subscriber is served by a real server process that gets
// SIGKILL mid-stream (no shutdown, no retry hint, the socket just dies) while updates keep being
// published on the other replica; the client resumes on the survivor with the last id it saw and
// must get every update exactly once, in publish order (draft-08 §Reconnection; resume works on
// any replica: docs/mercure.md#reconnection).
import t from 'tap';
import { openSse, type SseReader, startService, startTestServer, testDatabase, until } from './helpers.ts';

const HUB = '/.well-known/mercure';
const TOPIC = 'https://example.com/kill/1';
const TOTAL = 40;

async function post(base: string, data: string): Promise<string> {
  const res = await fetch(`${base}${HUB}`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ topic: TOPIC, data }).toString(),
  });
  const body = await res.text();
  if (res.status !== 200) throw new Error(`publish: ${res.status} ${body}`);
  return body;
}

const subscribeUrl = (base: string) => `${base}${HUB}?${new URLSearchParams({ match: TOPIC })}`;

t.test(
  'SIGKILL of the replica serving a subscriber: resume on the survivor, exactly once, in order',
  async (t) => {
    const url = await testDatabase(t);
    const killed = await startService(t, url);
    const survivor = await startTestServer(t, url);
    const exited = new Promise<string | null>((r) => killed.proc.once('exit', (_code, signal) => r(signal)));

    const first: SseReader = await openSse(t, subscribeUrl(killed.url));
    t.equal(first.status, 200);

    // Publishes on the survivor, one at a time (so publish order is commit order), until stopped.
    const ids: string[] = [];
    let stop = false;
    let publishedAtKill = 0;
    const publisher = (async () => {
      while (!stop && ids.length < TOTAL) ids.push(await post(survivor.url, `u${ids.length}`));
    })();
    try {
      // Mid-stream: the subscriber has some updates and more are being published.
      await first.waitFor(5, 20_000);
      publishedAtKill = ids.length;
      killed.proc.kill('SIGKILL');
      t.equal(await exited, 'SIGKILL', 'the serving replica died without shutting down');
      await first.ended;
      await until(() => ids.length >= TOTAL, 20_000, `${TOTAL} publishes on the survivor`);
    } finally {
      stop = true;
      await publisher;
    }

    t.ok(
      publishedAtKill < TOTAL,
      `killed after ${publishedAtKill} of ${TOTAL} publishes, while they went on`,
    );
    const before = first.received.map((m) => m.id!);
    t.ok(before.length >= 5 && before.length < TOTAL, `${before.length} updates arrived before the kill`);
    t.same(before, ids.slice(0, before.length), 'before the kill: a prefix of the publishes, in order');

    const resumed = await openSse(t, subscribeUrl(survivor.url), { 'last-event-id': before.at(-1)! });
    t.equal(resumed.status, 200);
    const after = (await resumed.waitFor(TOTAL - before.length, 20_000)).map((m) => m.id!);
    t.same([...before, ...after], ids, 'every update exactly once, in publish order');
    t.same(
      [...first.received, ...resumed.received].map((m) => m.data),
      ids.map((_, i) => `u${i}`),
      'with its data',
    );
    // Nothing else is pending for the resumed subscriber: one more update arrives right after the last.
    const extra = await post(survivor.url, 'extra');
    const [last] = (await resumed.waitFor(TOTAL - before.length + 1, 10_000)).slice(-1);
    t.equal(last.id, extra, 'no duplicate or stray update before the next live one');
    resumed.close();
  },
);
