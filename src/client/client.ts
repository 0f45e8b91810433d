/**
 * A TypeScript client for commitfeed's HTTP API. No dependencies beyond `fetch` (Node ≥ 18, browsers,
 * Deno, Bun) and the SSE parser next to it.
 *
 * `subscribe` is the part that earns its keep: it reads SSE over fetch and, after *any* failure,
 * resumes from the last id it saw; nothing is lost or repeated (subscription.ts says how).
 *
 * @example
 *   const cf = new CommitfeedClient({ url: 'http://127.0.0.1:3000' });
 *   await cf.publish('orders', { order: 42 }, { type: 'created' });
 *   for await (const e of cf.subscribe('orders', { from: 'earliest' })) console.log(e.id, e.type, e.data);
 */
import { HttpClient, seg } from './http.ts';
import {
  type ClaimOptions,
  type EnqueueOptions,
  type Enqueued,
  type Job,
  type JobRef,
  jobBody,
} from './jobs.ts';
import { type SubscribeOptions, Subscription } from './subscription.ts';
import { type JobContext, type WorkOptions, type Worker, startWorker } from './worker.ts';

export interface EventInit {
  /** Becomes the SSE `event:` name. */
  type?: string;
  /** Idempotency key, unique per stream: publishing the same key again returns the original id. */
  key?: string;
}

export interface Published {
  /** The event's cursor. */
  id: string;
  stream: string;
  /** True when `key` matched an earlier event: nothing new was appended. */
  duplicate: boolean;
}

/** One method per API call; the HTTP core (request, the SSE request) comes from HttpClient. */
export class CommitfeedClient extends HttpClient {
  // ── streams ────────────────────────────────────────────────────────────────────────────────────

  /**
   * Publishes one event; resolves once it is committed.
   * @example await cf.publish('orders', { order: 42 }, { type: 'created', key: 'order-42' });
   */
  publish(stream: string, data: unknown, init: EventInit = {}): Promise<Published> {
    return this.request('POST', `/v1/streams/${seg(stream)}/events`, { data, ...init });
  }

  /** Publishes 1–1000 events in one transaction (all or nothing); ids come back in order. */
  async publishBatch(
    stream: string,
    events: readonly ({ data: unknown } & EventInit)[],
  ): Promise<Published[]> {
    const res = await this.request<{ events: Published[] }>(
      'POST',
      `/v1/streams/${seg(stream)}/events`,
      events,
    );
    return res.events;
  }

  /**
   * Subscribes to one stream or several (one connection either way) over SSE. Iterate the result,
   * or pass `onEvent`. The `Subscription` resumes by itself after any failure; it ends only when
   * closed (`close()`, `signal`, `break` out of the loop) or on an error no retry can fix (a 4xx
   * such as `invalid_name` or 403), which the iterator throws.
   */
  subscribe<T = unknown>(
    streams: string | readonly string[],
    options: SubscribeOptions<T> = {},
  ): Subscription<T> {
    const list = typeof streams === 'string' ? [streams] : [...streams];
    if (list.length === 0) throw new TypeError('subscribe: at least one stream');
    return new Subscription<T>(this, list, options);
  }

  // ── queues ─────────────────────────────────────────────────────────────────────────────────────

  /** Enqueues one job; resolves once it is committed. */
  enqueue(queue: string, payload: unknown, options: EnqueueOptions = {}): Promise<Enqueued> {
    return this.request('POST', `/v1/queues/${seg(queue)}/jobs`, jobBody(payload, options));
  }

  /** Enqueues 1–1000 jobs in one transaction (all or nothing). */
  async enqueueBatch(
    queue: string,
    jobs: readonly ({ payload: unknown } & EnqueueOptions)[],
  ): Promise<Enqueued[]> {
    const res = await this.request<{ jobs: Enqueued[] }>(
      'POST',
      `/v1/queues/${seg(queue)}/jobs`,
      jobs.map(({ payload, ...o }) => jobBody(payload, o)),
    );
    return res.jobs;
  }

  /** Claims up to `max` jobs, waiting up to `wait` seconds for one; `[]` when none came. */
  async claim<T = unknown>(
    queue: string,
    options: ClaimOptions = {},
    signal?: AbortSignal,
  ): Promise<Job<T>[]> {
    const res = await this.request<{ jobs: Job<T>[] }>(
      'POST',
      `/v1/queues/${seg(queue)}/claim`,
      options,
      signal,
    );
    return res.jobs;
  }

  /** Completes a job. A lost or expired lease throws `CommitfeedError` with status 409. */
  async ack(queue: string, job: JobRef): Promise<void> {
    await this.request('POST', `/v1/queues/${seg(queue)}/jobs/${seg(job.id)}/ack`, { lease: job.lease });
  }

  /** Fails a job: it is retried after `delay` seconds (default: the job's backoff) or dead-lettered. */
  nack(
    queue: string,
    job: JobRef,
    options: { error?: string; delay?: number } = {},
  ): Promise<{ id: string; state: string; attempt: number; runAt: string | null }> {
    return this.request('POST', `/v1/queues/${seg(queue)}/jobs/${seg(job.id)}/nack`, {
      lease: job.lease,
      ...options,
    });
  }

  /** Extends a lease to `seconds` from now. */
  extend(queue: string, job: JobRef, seconds: number): Promise<{ id: string; leaseExpiresAt: string }> {
    return this.request('POST', `/v1/queues/${seg(queue)}/jobs/${seg(job.id)}/extend`, {
      lease: job.lease,
      seconds,
    });
  }

  /** Counts by state, oldest ready age, paused flag. */
  queueStats(queue: string): Promise<Record<string, unknown>> {
    return this.request('GET', `/v1/queues/${seg(queue)}`);
  }

  /**
   * Runs `handler` for each job of `queue`, `concurrency` at a time: claims with a long-poll, extends
   * the lease every `lease / 2` seconds while the handler runs, acks when it resolves and nacks with
   * its error when it throws. Delivery is at least once: a handler can see a job again after a
   * crash or a lost lease, so make it idempotent.
   *
   * @example
   *   const w = cf.work('emails', async (job) => send(job.payload), { concurrency: 4 });
   *   process.on('SIGTERM', () => w.stop());
   */
  work<T = unknown>(
    queue: string,
    handler: (job: Job<T>, ctx: JobContext) => unknown,
    options: WorkOptions = {},
  ): Worker {
    return startWorker(this, queue, handler, options);
  }
}
