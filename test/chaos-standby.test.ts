// The chaos checker in standby mode (test/chaos/checker.ts): the services read the feed from a
// streaming hot standby whose replay is paused and which is restarted, besides the usual faults;
// every reader must still get exactly the committed events, in order. The run's set-up (load, seed,
// ports) is test/chaos/short-run.ts.
import t from 'tap';
import { shortChaosRun } from './chaos/short-run.ts';

// Start-up of the service processes is slow on a busy machine: allow more than the default.
t.setTimeout(300_000);

t.test('chaos on a standby: every committed event, exactly once, in order', async (t) => {
  const result = await shortChaosRun(t, { standby: true });
  t.ok(result.counts.pauseReplay >= 1 && result.counts.restartStandby >= 1, 'standby faults were injected');
});
