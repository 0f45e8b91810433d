/**
 * Settings of what is kept and for how long (retention, partitions, idempotency keys, the janitor),
 * and of the flows into queues (the stream-subscription follower and the cron scheduler).
 */
import { MAX_SETTING_MS, bool, duration, int, type Setting } from './settings.ts';

export const RETENTION_SETTINGS = {
  retentionMs: duration(
    'RETENTION',
    '7d',
    1000,
    'Feed events (and dead queue jobs) older than this are dropped, a whole partition at a time.',
    { section: 'Retention (docs/operations.md#retention)' },
  ),
  jobRetentionMs: duration(
    'JOB_RETENTION',
    '10m',
    0,
    'Completed and cancelled queue jobs stay readable (GET a job: state, result) this long, then the janitor deletes them.',
  ),
  partitionIntervalMs: duration(
    'PARTITION_INTERVAL',
    '1d',
    1000,
    'Time span of one feed partition: the unit in which history is dropped.',
  ),
  partitionPremake: int('PARTITION_PREMAKE', 3, 1, 'Partitions kept created ahead of the clock.'),
  dedupWindowMs: duration(
    'DEDUP_WINDOW',
    '7d',
    1000,
    'An idempotency key deduplicates for at least this long after its event was appended.',
  ),
  janitorIntervalMs: duration(
    'JANITOR_INTERVAL',
    '5m',
    0,
    'How often this process tries to run maintenance (one instance at a time does it); 0: never here (then run `npm run maint -- run` from cron).',
    { max: MAX_SETTING_MS },
  ),
  janitorLockTimeoutMs: duration(
    'JANITOR_LOCK_TIMEOUT',
    '1s',
    10,
    'Longest maintenance waits for a table lock before retrying at its next run; publishes wait at most this long behind it.',
    { max: MAX_SETTING_MS },
  ),
  flows: bool(
    'FLOWS',
    true,
    'Run the stream-subscription follower and the cron scheduler here (every replica may: each event and each tick still becomes exactly one job).',
    'Flows into queues (docs/queues.md#streams-feeding-queues)',
  ),
  scheduleLateAfterMs: duration(
    'SCHEDULE_LATE_AFTER',
    '1m',
    1000,
    'A schedule tick not enqueued within this of its time counts as missed, and its catch-up policy decides (none, last, all).',
    { max: MAX_SETTING_MS },
  ),
} satisfies Record<string, Setting<unknown>>;
