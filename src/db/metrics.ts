/** The query pool's metrics: its connections by state, and requests waiting for one. */
import type pg from 'pg';
import type { Measured } from '../metrics.ts';

export function poolMetrics(pool: pg.Pool): Measured {
  return {
    registerMetrics(m) {
      m.gauges(
        'commitfeed_pg_pool_connections',
        'Query pool connections by state (total, idle) and requests waiting for one (waiting)',
        ['state'],
        (set) => {
          set({ state: 'total' }, pool.totalCount);
          set({ state: 'idle' }, pool.idleCount);
          set({ state: 'waiting' }, pool.waitingCount);
        },
      );
    },
  };
}
