/**
 * One endpoint's delivery worker in this process: claims deliveries from the endpoint's queue (a
 * lease each), POSTs them signed, and settles each: ack on 2xx, nack with the retry schedule's delay
 * otherwise (out of attempts, the job is dead: a failed delivery, resent over the API). Ordered
 * endpoints have one delivery in flight (their jobs are one ordered group: across replicas, and a
 * retry holds back every later event); concurrent ones up to their concurrency in this process.
 *
 * Lifecycle: started by the Webhooks service for every enabled endpoint, stopped when the endpoint
 * is disabled, changed in a way that needs a new worker, deleted, or the server stops: `stop()`
 * ends the claim waiting and waits for the deliveries in flight (each bounded by its timeout).
 * Failure: a database error while claiming is logged and retried after a backoff; one while settling
 * leaves the lease to run out, and the delivery is attempted again (at least once, never lost).
 * A 410 Gone disables the endpoint; so does failing without a success for WEBHOOK_DISABLE_AFTER.
 */
import type { Batcher } from '../commit/batcher.ts';
import type { ClaimedJob } from '../queues/claim.ts';
import type { Queues } from '../queues/queues.ts';
import type { AddressGuard } from './address-guard.ts';
import type { Attempt } from './attempts.ts';
import type { EndpointWithSecrets } from './endpoints.ts';
import { messageOf } from './message.ts';
import { RateLimiter, retryDelaySeconds } from './pacing.ts';
import { post } from './post.ts';
import { signatures } from './signing.ts';
import type { WebhookStats } from './stats.ts';

export interface WorkerParts {
  queues: Queues;
  guard: AddressGuard;
  attempts: Batcher<Attempt, number | null | undefined>;
  scheduleMs: readonly number[];
  disableAfterMs: number;
  /** Disables the endpoint (410, or failing too long). */
  disable(name: string, reason: string): Promise<void>;
  stats: WebhookStats;
  log: { warn(obj: object, msg?: string): void };
}

/** Longest claim wait: a stop or a change ends it sooner. */
const CLAIM_WAIT_SECONDS = 30;
/** A lease outlives the attempt's timeout by this much before another worker may take the job. */
const LEASE_MARGIN_SECONDS = 5;

export class EndpointWorker {
  private readonly abort = new AbortController();
  private readonly inflight = new Set<Promise<void>>();
  private loop: Promise<void> | undefined;
  private readonly rate: RateLimiter;

  constructor(
    public endpoint: EndpointWithSecrets,
    readonly queue: string,
    private readonly parts: WorkerParts,
  ) {
    this.rate = new RateLimiter(endpoint.rateLimit);
  }

  /** Takes a changed endpoint's settings (url, headers, secrets, timeout, rate) for the next deliveries. */
  update(e: EndpointWithSecrets): void {
    this.endpoint = e;
    this.rate.setRate(e.rateLimit);
  }

  start(): void {
    this.loop ??= this.run();
  }

  async stop(): Promise<void> {
    this.abort.abort();
    await this.loop;
    await Promise.all(this.inflight);
  }

  private async run(): Promise<void> {
    const signal = this.abort.signal;
    let backoffMs = 100;
    while (!signal.aborted) {
      const room = this.endpoint.concurrency - this.inflight.size;
      if (room <= 0) {
        await Promise.race(this.inflight);
        continue;
      }
      await this.rate.take(signal);
      if (signal.aborted) break;
      let jobs: ClaimedJob[];
      try {
        const leaseSeconds = this.endpoint.timeoutMs / 1000 + LEASE_MARGIN_SECONDS;
        const max = this.endpoint.rateLimit === null ? room : 1;
        ({ jobs } = await this.parts.queues.claim(
          this.queue,
          { max, leaseSeconds, waitSeconds: CLAIM_WAIT_SECONDS },
          signal,
        ));
        backoffMs = 100;
      } catch (err) {
        this.parts.log.warn(
          { endpoint: this.endpoint.name, err: (err as Error).message },
          'webhook claim failed',
        );
        await sleep(backoffMs, signal);
        backoffMs = Math.min(backoffMs * 2, 5_000);
        continue;
      }
      // The queues were closed (shutdown): nothing more comes; wait for the stop.
      if (jobs.length === 0 && this.parts.queues.wakeups.closed) await sleep(3_600_000, signal);
      for (const job of jobs) {
        const p = this.deliver(job).finally(() => this.inflight.delete(p));
        this.inflight.add(p);
      }
    }
  }

  /** One attempt at one delivery, then its settlement; never throws. */
  private async deliver(job: ClaimedJob): Promise<void> {
    const e = this.endpoint;
    const stats = this.parts.stats.of(e.name);
    try {
      const msg = messageOf(job.payload);
      const timestamp = Math.floor(Date.now() / 1000);
      // The old secret signs too while the rotation's overlap lasts.
      const overlap = e.previousSecret !== null && (e.previousUntil ?? 0) > Date.now();
      const secrets = overlap ? [e.secret, e.previousSecret!] : [e.secret];
      const headers = {
        ...e.headers,
        'content-type': 'application/json',
        'user-agent': 'commitfeed-webhooks',
        'webhook-id': msg.id,
        'webhook-timestamp': String(timestamp),
        'webhook-signature': signatures(secrets, msg.id, timestamp, msg.body),
      };
      const at = new Date();
      const res = await post(new URL(e.url), headers, msg.body, e.timeoutMs, this.parts.guard);
      stats.observe(res.ok, res.latencyMs);
      const ref = { queue: this.queue, id: job.id, lease: job.lease };
      const record = this.parts.attempts.publish([
        {
          endpoint: e.name,
          eventId: msg.id,
          jobId: job.id,
          attempt: job.attempt,
          at,
          ok: res.ok,
          status: res.status,
          latencyMs: res.latencyMs,
          error: res.error,
          response: res.response,
        },
      ]);
      if (res.ok) {
        await Promise.all([this.parts.queues.ack([ref]), record]);
        return;
      }
      const why = res.error ?? `HTTP ${res.status}`;
      if (res.status === 410) {
        // Gone: the receiver asks for no more. The delivery waits, ready, for the endpoint to be enabled.
        await this.parts.disable(e.name, 'the endpoint answered 410 Gone');
        await Promise.all([this.parts.queues.nack(ref, why, 0), record]);
        return;
      }
      const delay = retryDelaySeconds(this.parts.scheduleMs, job.attempt + 1);
      const [nacked, [failingSince]] = await Promise.all([this.parts.queues.nack(ref, why, delay), record]);
      if (nacked.ok && nacked.state === 'dead') stats.failedDeliveries++;
      if (typeof failingSince === 'number' && Date.now() - failingSince >= this.parts.disableAfterMs) {
        const since = new Date(failingSince).toISOString();
        await this.parts.disable(e.name, `every attempt failed since ${since}`);
      }
    } catch (err) {
      // The lease runs out and the delivery is attempted again.
      stats.errors++;
      this.parts.log.warn(
        { endpoint: e.name, job: job.id, err: (err as Error).message },
        'webhook delivery not settled',
      );
    }
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}
