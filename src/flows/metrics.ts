/**
 * The flows' metrics: per stream subscription, jobs made and events lost to retention (read from the
 * subscriptions table at scrape time, once per scrape: every instance reports the same), and this
 * process's follower and scheduler counters.
 */
import type { Db } from '../db/database.ts';
import type { Measured, Metrics } from '../metrics.ts';
import type { Follower } from './follower.ts';
import type { Scheduler } from './scheduler.ts';
import { type SubscriptionStatus, listSubscriptions } from './subscriptions.ts';

export function followerMetrics(db: Db, follower: Follower): Measured {
  return { registerMetrics: (m) => registerFollowerMetrics(m, db, follower) };
}

function registerFollowerMetrics(m: Metrics, db: Db, follower: Follower): void {
  const subscriptions = m.perScrape(() => listSubscriptions(db, null));
  const perSubscription = (name: string, help: string, read: (s: SubscriptionStatus) => number) =>
    m.gauges(name, help, ['subscription'], async (set) => {
      for (const s of (await subscriptions()) ?? []) set({ subscription: s.name }, read(s));
    });
  perSubscription(
    'commitfeed_subscription_jobs',
    'Jobs a stream subscription has made (one per event of its stream, filter applied)',
    (s) => s.jobs,
  );
  perSubscription(
    'commitfeed_subscription_lost_events',
    'Events retention dropped before the stream subscription turned them into jobs (alert on any increase)',
    (s) => s.lostEvents,
  );
  m.counter(
    'commitfeed_follower_steps_total',
    'Subscription follow steps (transactions) run here',
    () => follower.stats.steps,
  );
  m.counter(
    'commitfeed_follower_errors_total',
    'Failed follower passes (retried with backoff)',
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
