/**
 * This process's webhook counts, per endpoint: plain fields the workers bump and /metrics reads at
 * scrape time (src/webhooks/metrics.ts).
 */

export class EndpointStats {
  /** Attempts answered 2xx. */
  delivered = 0;
  /** Attempts that failed (non-2xx, timeout, connection error, refused address). */
  failedAttempts = 0;
  /** Deliveries that used their last attempt. */
  failedDeliveries = 0;
  /** Deliveries that could not be settled (a database error: their lease runs out and they are retried). */
  errors = 0;
  /** Attempt latency: sum (seconds) and count. */
  latencySum = 0;
  latencyCount = 0;

  observe(ok: boolean, latencyMs: number): void {
    if (ok) this.delivered++;
    else this.failedAttempts++;
    this.latencySum += latencyMs / 1000;
    this.latencyCount++;
  }
}

export class WebhookStats {
  readonly endpoints = new Map<string, EndpointStats>();
  /** Endpoints this process disabled (410 Gone, or failing too long). */
  disabled = 0;

  of(endpoint: string): EndpointStats {
    let s = this.endpoints.get(endpoint);
    if (!s) {
      s = new EndpointStats();
      this.endpoints.set(endpoint, s);
    }
    return s;
  }
}
