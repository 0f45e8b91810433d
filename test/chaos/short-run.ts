/**
 * The short chaos runs of `npm test` (test/chaos.test.ts, test/chaos-standby.test.ts): the checker
 * with 50 SSE readers over 4 streams and 2 service replicas for CHAOS_DURATION seconds (20 by
 * default), with the seed from CHAOS_SEED or a random one. The verdict is asserted with the command
 * that reruns the seed; each test checks its own faults on the returned counts.
 *
 * Ports derive from the run's own TEST_PG_PORT, so concurrent runs on one machine (each with its own)
 * never share a cluster or a service port, and are away from a checker run by hand (25360/25370).
 * The modes never share one either: primary-only, PostgreSQL on +1000 and services from +1010;
 * standby, the primary on +1020, the standby on +1021 and services from +1030; pooler, PostgreSQL on
 * +1005 and services from +1015 (PgBouncer takes a free port of the system's).
 */
import type { Test } from 'tap';
import { type ChaosResult, runChaos } from './checker.ts';

const TEST_PG_PORT = Number(process.env.TEST_PG_PORT ?? 25339);

export async function shortChaosRun(
  t: Test,
  mode: { standby: boolean; pooler?: boolean },
): Promise<ChaosResult> {
  const seed = Number(process.env.CHAOS_SEED ?? Math.floor(Math.random() * 1e6));
  const offset = mode.standby ? 1020 : mode.pooler ? 1005 : 1000;
  const result = await runChaos({
    seed,
    durationS: Number(process.env.CHAOS_DURATION ?? 20),
    readers: 50,
    streams: 4,
    replicas: 2,
    standby: mode.standby,
    pooler: mode.pooler,
    pgPort: TEST_PG_PORT + offset,
    basePort: TEST_PG_PORT + offset + 10,
    verbose: process.env.CHAOS_VERBOSE === '1',
  });
  t.comment(result.verdict);
  const flag = mode.standby ? ' --standby' : mode.pooler ? ' --pooler' : '';
  const rerun = `npx tsx test/chaos/checker.ts${flag} --seed ${seed}`;
  t.ok(result.ok, `verdict (rerun with CHAOS_SEED=${seed} ${rerun})`);
  return result;
}
