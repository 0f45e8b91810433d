// The chaos checker in pooler mode (test/chaos/checker.ts): the services behind a real PgBouncer in
// transaction mode (DIRECT_DATABASE_URL on PostgreSQL itself), SQL writers through it, and PgBouncer
// restarted under load besides the usual faults; every acknowledged event must reach every reader
// exactly once, in order. Skipped without Debian's pgbouncer. The run's set-up is
// test/chaos/short-run.ts.
import t from 'tap';
import { shortChaosRun } from './chaos/short-run.ts';
import { pgbouncerMissing } from './pgbouncer.ts';

// Start-up of the service processes is slow on a busy machine: allow more than the default.
t.setTimeout(300_000);

const skip = pgbouncerMissing();
t.test('chaos behind PgBouncer: every committed event, exactly once, in order', { skip }, async (t) => {
  const result = await shortChaosRun(t, { standby: false, pooler: true });
  t.ok(result.counts.restartPooler >= 1, 'PgBouncer was restarted under load');
});
