/**
 * /metrics for the flows into queues: per-subscription jobs made and events lost to retention (read
 * from the subscriptions table at scrape time: every instance reports the same), and this process's
 * follower and scheduler counters. Registered by src/ops/metrics.ts.
 */
import type { Kysely } from 'kysely';
import { Gauge, type Registry } from 'prom-client';
import type { Database } from '../db/database.ts';
import { mirrorCounter } from '../ops/mirror.ts';
import type { Follower } from './follower.ts';
import type { Scheduler } from './scheduler.ts';
import { type SubscriptionStatus, listSubscriptions } from './subscriptions.ts';

export function registerFlowMetrics(
  registry: Registry,
  deps: { db: Kysely<Database>; follower?: Follower; scheduler?: Scheduler },
): void {
  // One read serves both gauges of a scrape (the second collect within 1 s reuses it).
  let cached: { at: number; p: Promise<SubscriptionStatus[]> } | undefined;
  const subscriptions = () => {
    if (!cached || Date.now() - cached.at > 1000) {
      cached = { at: Date.now(), p: listSubscriptions(deps.db, null).catch(() => []) };
    }
    return cached.p;
  };
  const perSubscription = (name: string, help: string, read: (s: SubscriptionStatus) => number) =>
    new Gauge({
      name,
      help,
      labelNames: ['subscription'],
      registers: [registry],
      async collect() {
        this.reset();
        for (const s of await subscriptions()) this.set({ subscription: s.name }, read(s));
      },
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
  const mirror = (name: string, help: string, read: () => number) =>
    mirrorCounter(registry, name, help, read);
  const { follower, scheduler } = deps;
  if (follower) {
    mirror(
      'commitfeed_follower_steps_total',
      'Subscription follow steps (transactions) run here',
      () => follower.stats.steps,
    );
    mirror(
      'commitfeed_follower_errors_total',
      'Failed follower passes (retried with backoff)',
      () => follower.stats.errors,
    );
  }
  if (scheduler) {
    mirror(
      'commitfeed_schedule_jobs_total',
      'Schedule ticks enqueued by this process',
      () => scheduler.stats.jobs,
    );
    mirror(
      'commitfeed_schedule_errors_total',
      'Failed schedule firings (retried next pass)',
      () => scheduler.stats.errors,
    );
  }
}
