/**
 * The flows' metrics: per stream subscription, jobs made and events lost to retention (read from the
 * table commitfeed.subscriptions at scrape time, once per scrape: every instance reports the same),
 * and this process's follower and scheduler counters.
 */
import type { Db } from '../db/database.ts';
import type { Measured, Metrics } from '../metrics.ts';
import type { Follower } from './follower.ts';
import type { Scheduler } from './scheduler.ts';
import { type StreamSubscriptionStatus, listStreamSubscriptions } from './stream-subscriptions.ts';

export function followerMetrics(db: Db, follower: Follower): Measured {
  return { registerMetrics: (m) => registerFollowerMetrics(m, db, follower) };
}

function registerFollowerMetrics(m: Metrics, db: Db, follower: Follower): void {
  const streamSubscriptions = m.perScrape(() => listStreamSubscriptions(db, null));
  const perStreamSubscription = (name: string, help: string, read: (s: StreamSubscriptionStatus) => number) =>
    m.gauges(name, help, ['subscription'], async (set) => {
      for (const s of (await streamSubscriptions()) ?? []) set({ subscription: s.name }, read(s));
    });
  perStreamSubscription(
    'commitfeed_subscription_jobs',
    'Jobs a stream subscription has made (one per event of its stream, filter applied)',
    (s) => s.jobs,
  );
  perStreamSubscription(
    'commitfeed_subscription_lost_events',
    'Events retention dropped before the stream subscription turned them into jobs (alert on any increase)',
    (s) => s.lostEvents,
  );
  m.counter(
    'commitfeed_follower_steps_total',
    "Follow steps (transactions) of the stream subscriptions' follower run here",
    () => follower.stats.steps,
  );
  m.counter(
    'commitfeed_follower_errors_total',
    "Failed passes of the stream subscriptions' follower (retried with backoff)",
    () => follower.stats.errors,
  );
}

export function schedulerMetrics(scheduler: Scheduler): Measured {
  return { registerMetrics: (m) => registerSchedulerMetrics(m, scheduler) };
}

function registerSchedulerMetrics(m: Metrics, scheduler: Scheduler): void {
  m.counter(
    'commitfeed_schedule_jobs_total',
    'Schedule ticks enqueued by this process',
    () => scheduler.stats.jobs,
  );
  m.counter(
    'commitfeed_schedule_errors_total',
    'Failed schedule firings (retried next pass)',
    () => scheduler.stats.errors,
  );
}
