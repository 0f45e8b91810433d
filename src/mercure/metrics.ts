/** The Mercure hub's counters, kept by its routes and read by /metrics at scrape time. */
import type { Measured, Metrics } from '../metrics.ts';

export class MercureStats implements Measured {
  /** Updates committed through `POST /.well-known/mercure` (not the SQL function or /v1/tx). */
  published = 0;
  /** Open subscriber connections. */
  subscribers = 0;
  /** Update frames written to subscribers, live and catch-up. */
  frames = 0;

  registerMetrics(m: Metrics): void {
    m.counter(
      'commitfeed_mercure_updates_published_total',
      'Mercure updates committed through POST /.well-known/mercure (not the SQL function or /v1/tx)',
      () => this.published,
    );
    m.gauge(
      'commitfeed_mercure_subscribers',
      'Open Mercure hub subscriber connections',
      () => this.subscribers,
    );
    m.counter(
      'commitfeed_mercure_frames_total',
      'Update frames written to Mercure subscribers (live and catch-up)',
      () => this.frames,
    );
  }
}
