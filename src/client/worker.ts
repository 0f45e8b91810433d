/**
 * `work()`: runs a handler for each job of a queue, `concurrency` at a time. One loop claims with a
 * long-poll while there is room; each claimed job runs beside it, its lease extended every
 * `lease / 2` seconds, and is acked when the handler resolves or nacked with its error when it
 * throws. Delivery is at least once: a handler can see a job again after a crash or a lost lease.
 * A claim that brings nothing is followed by another, but never sooner than IDLE_CLAIM_MS after it
 * began: the long-poll is what waits (on an empty queue or a paused one, whose resume wakes it), and
 * an empty answer that came at once (`wait` 0, a paused queue, a server shutting down) must not turn
 * the loop into a stream of requests.
 *
 * Lifecycle: starts when made; `stop()` (or `signal`) aborts a waiting claim, lets running handlers
 * finish and settle, then resolves `done`. Claim failures that a retry can fix are reported to
 * `onError` and retried with backoff; one that cannot (a 400, a 403) stops the worker and rejects
 * `done`. A lost lease (409) aborts the handler's `signal` and leaves the job to its new holder.
 */
import { type BackoffOptions, backoffDelay, sleep } from './backoff.ts';
import { CommitfeedError } from './errors.ts';
import type { ClaimOptions, Job, JobRef } from './jobs.ts';

export interface WorkOptions {
  /** Jobs handled at once (default 1). */
  concurrency?: number;
  /** Lease in seconds; extended every `lease / 2` while the handler runs (default 30). */
  lease?: number;
  /** Long-poll seconds per claim (default 20). With 0, an idle worker claims once a second. */
  wait?: number;
  /** Stops the worker (like `stop()`). */
  signal?: AbortSignal;
  /** Failures the loop survives (claim errors, a lost lease, an ack that failed); default: ignored. */
  onError?: (error: unknown, job?: Job) => void;
  backoff?: BackoffOptions;
}

export interface JobContext {
  /** Aborted when the lease is lost (another worker may now hold the job) or the worker stops hard. */
  signal: AbortSignal;
}

export interface Worker {
  /** Stops claiming, waits for running handlers to finish (acking or nacking them) and resolves. */
  stop(): Promise<void>;
  /** Settles when the worker has stopped: rejects on an error it cannot retry (e.g. 400, 403). */
  done: Promise<void>;
  /** Jobs acked / nacked so far. */
  readonly stats: { acked: number; nacked: number; lost: number };
}

/** The queue calls a worker makes: the client's own methods. */
export interface QueueCalls {
  claim<T>(queue: string, options: ClaimOptions, signal?: AbortSignal): Promise<Job<T>[]>;
  extend(queue: string, job: JobRef, seconds: number): Promise<unknown>;
  ack(queue: string, job: JobRef): Promise<void>;
  nack(queue: string, job: JobRef, options: { error?: string }): Promise<unknown>;
}

type Handler<T> = (job: Job<T>, ctx: JobContext) => unknown;
type Outcome = { ok: true } | { ok: false; error: unknown };

/** Shortest time from one empty claim's start to the next claim: at most one idle claim a second. */
const IDLE_CLAIM_MS = 1000;

export function startWorker<T>(
  client: QueueCalls,
  queue: string,
  handler: Handler<T>,
  opts: WorkOptions,
): Worker {
  return new JobLoop(client, queue, handler, opts).start();
}

class JobLoop<T> {
  readonly stats = { acked: 0, nacked: 0, lost: 0 };
  private readonly stopping = new AbortController();
  private readonly running = new Set<Promise<void>>();
  private readonly concurrency: number;
  private readonly lease: number;
  private readonly wait: number;

  constructor(
    private readonly client: QueueCalls,
    private readonly queue: string,
    private readonly handler: Handler<T>,
    private readonly opts: WorkOptions,
  ) {
    this.concurrency = Math.max(1, opts.concurrency ?? 1);
    this.lease = opts.lease ?? 30;
    this.wait = opts.wait ?? 20;
    if (opts.signal) {
      if (opts.signal.aborted) this.stopping.abort();
      else opts.signal.addEventListener('abort', () => this.stopping.abort(), { once: true });
    }
  }

  start(): Worker {
    const { stopping } = this;
    const done = this.loop().finally(async () => {
      stopping.abort();
      await Promise.allSettled([...this.running]);
    });
    done.catch(() => {});
    return {
      stats: this.stats,
      done,
      async stop() {
        stopping.abort();
        await done.catch(() => {});
      },
    };
  }

  /** Claims while there is room, until stopped. */
  private async loop(): Promise<void> {
    let failures = 0;
    while (!this.stopping.signal.aborted) {
      const free = this.concurrency - this.running.size;
      if (free === 0) {
        await Promise.race(this.running);
        continue;
      }
      let jobs: Job<T>[];
      const claimedAt = Date.now();
      try {
        // Aborting a waiting claim on stop: a job handed out in that instant is redelivered when its
        // lease expires (at least once), never lost.
        const claim = { max: free, lease: this.lease, wait: this.wait };
        jobs = await this.client.claim<T>(this.queue, claim, this.stopping.signal);
        failures = 0;
      } catch (err) {
        if (this.stopping.signal.aborted) break;
        if (err instanceof CommitfeedError && !err.retryable) throw err;
        this.report(err);
        failures++;
        const floorMs = (err as CommitfeedError).retryAfterMs ?? 0;
        await sleep(backoffDelay(failures, floorMs, this.opts.backoff), this.stopping.signal);
        continue;
      }
      if (jobs.length === 0) {
        const idle = claimedAt + IDLE_CLAIM_MS - Date.now();
        if (idle > 0) await sleep(idle, this.stopping.signal);
        continue;
      }
      for (const job of jobs) {
        const p = this.runJob(job).finally(() => this.running.delete(p));
        this.running.add(p);
      }
    }
  }

  /** One job: the handler under a kept lease, then its ack or nack (unless the lease was lost). */
  private async runJob(job: Job<T>): Promise<void> {
    const lost = new AbortController();
    const timer = this.keepLease(job, lost);
    const { handler } = this;
    let outcome: Outcome;
    try {
      await handler(job, { signal: lost.signal });
      outcome = { ok: true };
    } catch (error) {
      outcome = { ok: false, error };
    } finally {
      clearInterval(timer);
    }
    if (lost.signal.aborted) {
      this.stats.lost++;
      return; // someone else may hold the job now: its ack or nack is theirs
    }
    await this.settle(job, outcome);
  }

  /** Extends the lease while the handler runs; a 409 means it is lost, and aborts `lost`. */
  private keepLease(job: Job<T>, lost: AbortController): ReturnType<typeof setInterval> {
    // Extend at half the lease: one failed extension still leaves time for another.
    const timer = setInterval(
      () => {
        this.client.extend(this.queue, job, this.lease).catch((err: unknown) => {
          if (err instanceof CommitfeedError && err.status === 409) {
            clearInterval(timer);
            lost.abort(err);
          }
          this.report(err, job);
        });
      },
      Math.max(100, (this.lease * 1000) / 2),
    );
    return timer;
  }

  private async settle(job: Job<T>, outcome: Outcome): Promise<void> {
    try {
      if (outcome.ok) {
        await this.client.ack(this.queue, job);
        this.stats.acked++;
      } else {
        const e = outcome.error;
        const message = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
        await this.client.nack(this.queue, job, { error: message.slice(0, 10_000) });
        this.stats.nacked++;
      }
    } catch (err) {
      if (err instanceof CommitfeedError && err.status === 409) this.stats.lost++;
      this.report(err, job);
    }
  }

  private report(err: unknown, job?: Job): void {
    try {
      this.opts.onError?.(err, job);
    } catch {
      // a throwing onError must not stop the worker
    }
  }
}
