/**
 * What the Queues service has done in this process, as plain numbers: jobs enqueued, claimed, acked,
 * nacked (retried or dead-lettered), leases found expired, and how long claims waited before they
 * got jobs. Incremented in place on the request path (a field add, a bucket add); /metrics copies
 * them out at scrape time (src/ops/metrics.ts), so nothing here knows about Prometheus.
 *
 * Counts are this process's: a lease that expired is counted by the process whose claim released it;
 * the database's totals (depth by state, `completed`) are read from the tables instead.
 */

/** Per-queue counts since start. */
export interface QueueCounts {
  /** Jobs written by enqueues (duplicates of an existing key not counted). */
  enqueued: number;
  /** Jobs handed out by claims. */
  claimed: number;
  /** Jobs completed by an ack holding their live lease. */
  acked: number;
  /** Nacks that scheduled a retry. */
  nackedRetry: number;
  /** Nacks that dead-lettered the job (its attempts were used up). */
  nackedDead: number;
  /** Leases found expired and released by a claim (ready again, or dead when out of attempts). */
  leasesExpired: number;
  /** Jobs dead-lettered: by a nack, or by a lease expiring on the last attempt. */
  deadLettered: number;
  /** Jobs cancelled before a worker took them. */
  cancelled: number;
}

/** Upper bounds (seconds) of the claim-wait buckets: immediate claims to full long-polls. */
export const CLAIM_WAIT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60] as const;

/** A fixed-bucket histogram of seconds: `counts[i]` observations ≤ `bounds[i]` and > the bound before. */
export class WaitTimes {
  readonly counts: number[];
  count = 0;
  sum = 0;

  constructor(readonly bounds: readonly number[] = CLAIM_WAIT_BUCKETS) {
    this.counts = bounds.map(() => 0);
  }

  observe(seconds: number): void {
    this.count++;
    this.sum += seconds;
    const i = this.bounds.findIndex((b) => seconds <= b);
    if (i >= 0) this.counts[i]++;
  }

  /** Observations ≤ each bound (Prometheus `le` buckets, without +Inf, which is `count`). */
  cumulative(): number[] {
    let acc = 0;
    return this.counts.map((c) => (acc += c));
  }
}

export class QueueCounters {
  readonly byQueue = new Map<string, QueueCounts>();
  /** Seconds from a claim's start to its answer, for claims that returned jobs. */
  readonly claimWait = new WaitTimes();
  /** Claims that answered without jobs (the wait ran out, the client left, or shutdown). */
  emptyClaims = 0;

  /** The counts of `queue`, created at zero on first use. */
  of(queue: string): QueueCounts {
    let c = this.byQueue.get(queue);
    if (!c) {
      c = {
        enqueued: 0,
        claimed: 0,
        acked: 0,
        nackedRetry: 0,
        nackedDead: 0,
        leasesExpired: 0,
        deadLettered: 0,
        cancelled: 0,
      };
      this.byQueue.set(queue, c);
    }
    return c;
  }
}
