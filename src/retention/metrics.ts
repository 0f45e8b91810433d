/**
 * Retention's metrics: the feed's size on disk, its partitions and oldest event, and the last
 * maintenance run (by any instance), from one feedStats read per scrape (catalog sizes, one index
 * probe) shared by the gauges; -1 when the database cannot be read. And this process's janitor's
 * skipped runs.
 */
import type { Db } from '../db/database.ts';
import type { Measured, Metrics } from '../metrics.ts';
import type { Janitor } from './janitor.ts';
import { type FeedStats, feedStats } from './partitions.ts';

export function retentionMetrics(db: Db, janitor: Janitor): Measured {
  return { registerMetrics: (m) => registerRetentionMetrics(m, db, janitor) };
}

function registerRetentionMetrics(m: Metrics, db: Db, janitor: Janitor): void {
  const retention = m.perScrape(() => feedStats(db));
  const fromStats = (name: string, help: string, value: (s: FeedStats) => number) =>
    m.gauge(
      name,
      help,
      async () => {
        const s = await retention();
        return s ? value(s) : -1;
      },
      'max',
    );
  fromStats(
    'commitfeed_feed_bytes',
    'Bytes on disk of the feed (every partition, indexes included)',
    (s) => s.bytes,
  );
  fromStats(
    'commitfeed_feed_partitions',
    'Partitions of the feed (the default partition included)',
    (s) => s.partitions.length,
  );
  fromStats(
    'commitfeed_feed_oldest_event_age_seconds',
    'Age of the oldest retained event (0 when the feed is empty)',
    (s) => (s.oldestEventAt ? Math.max(0, (Date.now() - s.oldestEventAt.getTime()) / 1000) : 0),
  );
  fromStats(
    'commitfeed_janitor_last_run_timestamp_seconds',
    'When the last maintenance run (by any instance) started, Unix time (0: never)',
    (s) => (s.lastRun ? s.lastRun.startedAt.getTime() / 1000 : 0),
  );
  fromStats('commitfeed_janitor_last_run_duration_seconds', 'Duration of the last maintenance run', (s) =>
    s.lastRun ? s.lastRun.durationMs / 1000 : 0,
  );
  m.counter(
    'commitfeed_janitor_runs_skipped_total',
    'Maintenance runs this process skipped because another instance held the lock',
    () => janitor.stats.skipped,
  );
}
