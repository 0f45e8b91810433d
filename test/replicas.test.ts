// Several replicas on one database: concurrent start-up migrates once, and a publish on one replica
// reaches SSE subscribers on the others, woken by the NOTIFY (their fallback poll is set far beyond
// the test's patience). Cross-replica delivery latency is measured and reported, not asserted.
import { sql } from 'kysely';
import t from 'tap';
import { isPrimer, parseSse, splitEventId, textChunks } from '../src/client/sse.ts';
import { emptyDatabase, publish, sleep, sqlClient, startTestServer, within } from './helpers.ts';

t.test('three replicas: one migration run, and every publish reaches the others', async (t) => {
  // Empty, not cloned from the migrated template: the replicas' start-up must do the migrating.
  const dbUrl = await emptyDatabase(t);
  // No fallback poll within the test: only a NOTIFY can wake the other replicas.
  const opts = { pollIntervalMs: 600_000 };
  const replicas = await Promise.all([0, 1, 2].map(() => startTestServer(t, dbUrl, opts)));
  const db = sqlClient(t, dbUrl);
  const { rows } = await sql<{ name: string; n: number }>`
    select name, count(*)::int as n from commitfeed.kysely_migration group by name`.execute(db);
  t.ok(rows.length >= 1, 'migrations recorded');
  t.ok(
    rows.every((r) => r.n === 1),
    'each migration ran once although three replicas started at once',
  );

  const [a, b, c] = replicas;
  // Readers that stamp each message as it is parsed.
  const arrived = new Map<string, number[]>();
  const listen = async (url: string) => {
    const abort = new AbortController();
    t.teardown(() => abort.abort());
    const res = await fetch(url, { headers: { accept: 'text/event-stream' }, signal: abort.signal });
    const got: string[] = [];
    let primed!: () => void;
    const isPrimed = new Promise<void>((r) => (primed = r));
    const done = (async () => {
      try {
        for await (const m of parseSse(textChunks(res.body!))) {
          if (isPrimer(m)) {
            primed();
            continue;
          }
          if (m.data === undefined) continue;
          const at = performance.now();
          // On two streams the id names the stream after the cursor: compare cursors.
          const id = splitEventId(m.id!).cursor;
          got.push(id);
          const xs = arrived.get(id) ?? [];
          xs.push(at);
          arrived.set(id, xs);
          if (got.length === N) return;
        }
      } catch {
        // aborted at teardown
      }
    })();
    await isPrimed;
    return { got, done };
  };
  const N = 300;
  const onB = await listen(`${b.url}/v1/streams/x/events`);
  const onC = await listen(`${c.url}/v1/events?stream=x&stream=y`);

  // Publish on A at a steady pace; note when each request was sent.
  const sentAt = new Map<string, number>();
  for (let i = 0; i < N; i++) {
    const t0 = performance.now();
    const r = await publish(a.url, 'x', { data: { i } });
    if (r.status !== 201) t.fail(`publish ${i} answered ${r.status}`);
    sentAt.set(r.body.id, t0);
    await sleep(5);
  }
  await within(Promise.all([onB.done, onC.done]), 20000, 'replicas B and C to deliver every event');

  const ids = [...sentAt.keys()];
  t.same(onB.got, ids, 'replica B delivered every event published on A, in order');
  t.same(onC.got, ids, 'replica C (two streams on one connection) too');
  t.ok(b.feed.listener.stats.notifications > 0 && c.feed.listener.stats.notifications > 0, 'woken by NOTIFY');

  // From sending the POST on A to parsing the frame on B or C (includes the HTTP round trip).
  const lat = ids
    .flatMap((id) => (arrived.get(id) ?? []).map((at) => at - sentAt.get(id)!))
    .sort((x, y) => x - y);
  const q = (p: number) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))].toFixed(1);
  t.comment(
    `cross-replica publish→SSE latency over ${lat.length} deliveries: p50 ${q(0.5)} ms, p99 ${q(0.99)} ms, max ${q(1)} ms`,
  );
});
