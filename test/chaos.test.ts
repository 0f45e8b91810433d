// A short run of the chaos checker (test/chaos/checker.ts; run it alone for longer runs): its own
// PostgreSQL and service processes, writers, 50 SSE readers, kill -9, Postgres restarts, cut
// connections and a held transaction; every reader must get exactly the committed events, in order.
import t from 'tap';
import { runChaos } from './chaos/checker.ts';

// Start-up of the service processes is slow on a busy machine: allow more than the default.
t.setTimeout(300_000);

t.test('chaos: every committed event, exactly once, in order, whatever happens', async (t) => {
  const seed = Number(process.env.CHAOS_SEED ?? Math.floor(Math.random() * 1e6));
  const result = await runChaos({
    seed,
    durationS: Number(process.env.CHAOS_DURATION ?? 20),
    readers: 50,
    streams: 4,
    replicas: 2,
    // Away from the test server (54339/54353) and from a checker run by hand (54360/54370).
    pgPort: 54362,
    basePort: 54385,
    verbose: process.env.CHAOS_VERBOSE === '1',
  });
  t.comment(result.verdict);
  t.ok(result.ok, `verdict (rerun with CHAOS_SEED=${seed} npx tsx test/chaos/checker.ts --seed ${seed})`);
  t.ok(result.counts.faults >= 3, 'several faults were injected');
});
