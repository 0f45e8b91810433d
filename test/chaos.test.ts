// A short run of the chaos checker (test/chaos/checker.ts; run it alone for longer runs): its own
// PostgreSQL and service processes, writers, 50 SSE readers, kill -9, Postgres restarts, cut
// connections and a held transaction; every reader must get exactly the committed events, in order.
import t from 'tap';
import { runChaos } from './chaos/checker.ts';

const TEST_PG_PORT = Number(process.env.TEST_PG_PORT ?? 54339);

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
    // Derived from the run's own port, so concurrent runs on one machine (each with its own
    // TEST_PG_PORT) never share a cluster or a service port; away from a checker run by hand (54360/54370).
    pgPort: TEST_PG_PORT + 1000,
    basePort: TEST_PG_PORT + 1010,
    verbose: process.env.CHAOS_VERBOSE === '1',
  });
  t.comment(result.verdict);
  t.ok(result.ok, `verdict (rerun with CHAOS_SEED=${seed} npx tsx test/chaos/checker.ts --seed ${seed})`);
  t.ok(result.counts.faults >= 3, 'several faults were injected');
});
