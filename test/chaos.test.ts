// A short run of the chaos checker (test/chaos/checker.ts; run it alone for longer runs): its own
// PostgreSQL and service processes, writers, 50 SSE readers, kill -9, Postgres restarts, cut
// connections and a held transaction; every reader must get exactly the committed events, in order.
// The run's set-up (load, seed, ports) is test/chaos/short-run.ts.
import t from 'tap';
import { MIN_FAULTS } from './chaos/checker.ts';
import { shortChaosRun } from './chaos/short-run.ts';

// Start-up of the service processes is slow on a busy machine: allow more than the default.
t.setTimeout(300_000);

t.test('chaos: every committed event, exactly once, in order, whatever happens', async (t) => {
  const result = await shortChaosRun(t, { standby: false });
  t.ok(result.counts.faults >= MIN_FAULTS, `several faults were injected (${result.counts.faults})`);
});
