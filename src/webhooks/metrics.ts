/**
 * Webhook metrics: per endpoint, this process's attempts (delivered, failed), failed deliveries and
 * attempt latency, from its own counts; and the backlog and lag of every endpoint, read from the
 * tables once per scrape (every instance reports the same). No secret is ever a label or a value.
 */
import type { Db } from '../db/database.ts';
import type { Measured, Metrics } from '../metrics.ts';
import { backlogs, listEndpoints } from './endpoints.ts';
import { type Webhooks, internalName } from './webhooks.ts';

export function webhookMetrics(db: Db, webhooks: Webhooks): Measured {
  return { registerMetrics: (m) => registerWebhookMetrics(m, db, webhooks) };
}

function registerWebhookMetrics(m: Metrics, db: Db, webhooks: Webhooks): void {
  const stats = webhooks.stats;
  m.counters(
    'commitfeed_webhook_attempts_total',
    'Delivery attempts made here, by endpoint and outcome (delivered: 2xx; failed: anything else, timeouts and refused addresses included)',
    ['endpoint', 'outcome'],
    (add) => {
      for (const [endpoint, s] of stats.endpoints) {
        add({ endpoint, outcome: 'delivered' }, s.delivered);
        add({ endpoint, outcome: 'failed' }, s.failedAttempts);
      }
    },
  );
  m.counters(
    'commitfeed_webhook_failed_deliveries_total',
    'Deliveries whose last attempt failed here (resend them over the API)',
    ['endpoint'],
    (add) => {
      for (const [endpoint, s] of stats.endpoints) add({ endpoint }, s.failedDeliveries);
    },
  );
  m.counters(
    'commitfeed_webhook_attempt_seconds_sum',
    'Total time of the attempts made here, by endpoint (divide by commitfeed_webhook_attempt_seconds_count)',
    ['endpoint'],
    (add) => {
      for (const [endpoint, s] of stats.endpoints) add({ endpoint }, s.latencySum);
    },
  );
  m.counters(
    'commitfeed_webhook_attempt_seconds_count',
    'Attempts made here, by endpoint',
    ['endpoint'],
    (add) => {
      for (const [endpoint, s] of stats.endpoints) add({ endpoint }, s.latencyCount);
    },
  );
  registerBacklogMetrics(m, db);
  m.counter(
    'commitfeed_webhook_disabled_total',
    'Endpoints this process disabled (410 Gone, or failing too long)',
    () => stats.disabled,
  );
}

/** Backlog, failed deliveries, lag and enabled, from the tables (one read per scrape). */
function registerBacklogMetrics(m: Metrics, db: Db): void {
  const state = m.perScrape(async () => {
    const endpoints = await listEndpoints(db, null);
    return {
      endpoints,
      backlog: await backlogs(
        db,
        endpoints.map((e) => internalName(e.name)),
      ),
    };
  });
  const perEndpoint = (
    name: string,
    help: string,
    read: (b: { pending: number; failed: number; lagSeconds: number }, enabled: boolean) => number,
  ) =>
    m.gauges(
      name,
      help,
      ['endpoint'],
      async (set) => {
        const s = await state();
        for (const e of s?.endpoints ?? []) {
          const b = s?.backlog.get(internalName(e.name));
          if (b) set({ endpoint: e.name }, read(b, e.enabled));
        }
      },
      'max',
    );
  perEndpoint(
    'commitfeed_webhook_backlog',
    'Deliveries waiting, retrying or in flight, by endpoint',
    (b) => b.pending,
  );
  perEndpoint(
    'commitfeed_webhook_failed',
    'Failed deliveries kept for a resend, by endpoint',
    (b) => b.failed,
  );
  perEndpoint(
    'commitfeed_webhook_lag_seconds',
    'Age of the oldest pending event, by endpoint',
    (b) => b.lagSeconds,
  );
  perEndpoint('commitfeed_webhook_enabled', '1 when the endpoint is enabled, 0 when disabled', (_b, on) =>
    on ? 1 : 0,
  );
}
