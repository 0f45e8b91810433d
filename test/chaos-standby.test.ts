// The chaos checker in standby mode (test/chaos/checker.ts): the services read the feed from a
// streaming hot standby whose replay is paused and which is restarted, besides the usual faults;
// every reader must still get exactly the committed events, in order.
import t from 'tap';
import { runChaos } from './chaos/checker.ts';

const TEST_PG_PORT = Number(process.env.TEST_PG_PORT ?? 54339);

t.setTimeout(300_000);

t.test('chaos on a standby: every committed event, exactly once, in order', async (t) => {
  const seed = Number(process.env.CHAOS_SEED ?? Math.floor(Math.random() * 1e6));
  const result = await runChaos({
    seed,
    durationS: Number(process.env.CHAOS_DURATION ?? 20),
    readers: 50,
    streams: 4,
    replicas: 2,
    standby: true,
    // Away from the primary-only run's ports (TEST_PG_PORT + 1000 and + 1010): primary, standby, services.
    pgPort: TEST_PG_PORT + 1020,
    basePort: TEST_PG_PORT + 1030,
    verbose: process.env.CHAOS_VERBOSE === '1',
  });
  t.comment(result.verdict);
  t.ok(
    result.ok,
    `verdict (rerun with CHAOS_SEED=${seed} npx tsx test/chaos/checker.ts --standby --seed ${seed})`,
  );
  t.ok(result.counts.pauseReplay >= 1 && result.counts.restartStandby >= 1, 'standby faults were injected');
});
