/**
 * A TypeScript client for commitfeed's HTTP API. No dependencies beyond `fetch` (Node ≥ 18, browsers,
 * Deno, Bun) and the SSE parser next to it.
 *
 * `subscribe` is the part that earns its keep: it reads SSE over fetch and, after *any* failure — a
 * dropped connection, a server restart, a non-200 answer, the server's `event: unavailable` — it
 * reconnects with exponential backoff and `Last-Event-ID` set to the last id it saw, including the
 * id the server primes at connect. Nothing is lost or repeated. An `event: reset` (the cursor fell
 * behind retention) moves the cursor to the server's `resumeFrom` and tells `onReset`: native
 * `EventSource` cannot follow either of those.
 *
 * @example
 *   const cf = new CommitfeedClient({ url: 'http://127.0.0.1:3000' });
 *   await cf.publish('orders', { order: 42 }, { type: 'created' });
 *   for await (const e of cf.subscribe('orders', { from: 'earliest' })) console.log(e.id, e.type, e.data);
 */
import { isPrimer, parseSse, splitEventId, textChunks } from './sse.ts';

/** An API error: the HTTP status and the server's stable `code` (`status` 0: no answer at all). */
export class CommitfeedError extends Error {
  override readonly name = 'CommitfeedError';
  constructor(
    /** HTTP status; 0 when the request never got an answer (network error, timeout). */
    readonly status: number,
    /** The server's stable code (e.g. `invalid_name`, `unavailable`), or `network_error`. */
    readonly code: string,
    message: string,
    /** Milliseconds from the server's `Retry-After`, when it sent one. */
    readonly retryAfterMs?: number,
    /** The parsed error body, when there was one. */
    readonly body?: unknown,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }

  /** Worth retrying as is: no answer, a 5xx, 408, 425 or 429. Other 4xx need a different request. */
  get retryable(): boolean {
    return this.status === 0 || this.status >= 500 || [408, 425, 429].includes(this.status);
  }
}

export interface ClientOptions {
  /** Base URL of the service, e.g. `http://127.0.0.1:3000`. */
  url: string;
  /** Sent as `Authorization: Bearer <token>` when set. */
  token?: string;
  /** Extra headers on every request. */
  headers?: Record<string, string>;
  /** A fetch implementation (default: the global one). */
  fetch?: typeof fetch;
}

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

export interface StreamEvent<T = unknown> {
  /** The event's cursor: resume after it with `after` (the client does this itself). */
  id: string;
  /** The stream the event was published to (several streams share one connection). */
  stream: string;
  /** The SSE event name: the published `type`, or `message` when it had none. */
  type: string;
  /** The event data, parsed from JSON. */
  data: T;
}

export interface ResetInfo {
  reason: string;
  /** The cursor the subscription continues from. */
  resumeFrom: string;
  /** The cursor the subscription was at when the server reset it. */
  lastId: string | undefined;
}

export interface ReconnectInfo {
  /** Consecutive failed connections, this one included (1: the first retry after a healthy one). */
  attempt: number;
  /** Milliseconds the client waits before this attempt. */
  delayMs: number;
  /** The cursor the next connection resumes after (undefined: not connected yet). */
  lastId: string | undefined;
  /** What ended the previous connection. */
  error: CommitfeedError;
}

export interface BackoffOptions {
  /** First retry delay in ms (the server's `retry:` hint wins when larger). Default 250. */
  initialMs?: number;
  /** Longest delay in ms. Default 30000. */
  maxMs?: number;
}

export interface SubscribeOptions<T = unknown> {
  /** Where to start when `after` is not given: `latest` (default) or `earliest`. */
  from?: 'earliest' | 'latest';
  /** Start after this cursor (exclusive). */
  after?: string;
  /**
   * Push instead of pull: each event is handed to `onEvent` (awaited, so a slow handler slows the
   * stream instead of buffering it), and the subscription runs without being iterated. Its `done`
   * settles when it stops.
   */
  onEvent?: (event: StreamEvent<T>) => unknown;
  /** The server reset the cursor (older events were trimmed by retention). */
  onReset?: (info: ResetInfo) => void;
  /** Called before each reconnect attempt. */
  onReconnect?: (info: ReconnectInfo) => void;
  backoff?: BackoffOptions;
  /**
   * A connection that delivers no bytes for this long is considered dead and replaced (the server
   * sends a heartbeat every 15 s by default). Default 45000 ms; 0 disables.
   */
  idleTimeoutMs?: number;
  /** Stops the subscription (like `close()`). */
  signal?: AbortSignal;
}

/** Job options, as the queue API takes them. */
export interface EnqueueOptions {
  /** Seconds before the job may run. */
  delay?: number;
  /** ISO time the job may run from. */
  runAt?: string | Date;
  /** Lower runs first (default 0). */
  priority?: number;
  /** Dedup key among this queue's jobs not yet completed. */
  key?: string;
  /** Attempts before the job is dead-lettered (server default 5). */
  maxAttempts?: number;
  backoff?: { type?: 'exponential' | 'fixed'; delay?: number; max?: number; jitter?: boolean };
}

export interface Enqueued {
  id: string;
  duplicate: boolean;
}

export interface Job<T = unknown> {
  id: string;
  payload: T;
  /** 1 on the first delivery. */
  attempt: number;
  maxAttempts?: number;
  /** The lease token: ack, nack and extend must present it. */
  lease: string;
  leaseExpiresAt: string;
}

/** What ack/nack/extend need: a job's id and the lease token its claim returned. */
export type JobRef = Pick<Job, 'id' | 'lease'>;

export interface ClaimOptions {
  /** Most jobs to claim (1–100, default 1). */
  max?: number;
  /** Seconds each claimed job is leased (default 30). */
  lease?: number;
  /** Long-poll seconds when nothing is claimable (0–30, default 0). */
  wait?: number;
}

export interface WorkOptions {
  /** Jobs handled at once (default 1). */
  concurrency?: number;
  /** Lease in seconds; extended every `lease / 2` while the handler runs (default 30). */
  lease?: number;
  /** Long-poll seconds per claim (default 20). */
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

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });

/** Exponential backoff with ±20% jitter, so clients reconnecting after one restart spread out. */
function backoffDelay(attempt: number, floorMs: number, opts: BackoffOptions | undefined): number {
  const initial = Math.max(opts?.initialMs ?? 250, floorMs);
  const max = Math.max(opts?.maxMs ?? 30_000, initial);
  const base = Math.min(max, initial * 2 ** Math.max(0, attempt - 1));
  return Math.round(base * (0.8 + Math.random() * 0.4));
}

function retryAfterMs(res: Response): number | undefined {
  const h = res.headers.get('retry-after');
  if (!h) return undefined;
  const s = Number(h);
  if (Number.isFinite(s)) return s * 1000;
  const at = Date.parse(h);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

async function errorFrom(res: Response): Promise<CommitfeedError> {
  const text = await res.text().catch(() => '');
  let body: { code?: unknown; message?: unknown } | undefined;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON (a proxy's error page)
  }
  const code = typeof body?.code === 'string' ? body.code : `http_${res.status}`;
  const message =
    typeof body?.message === 'string' ? body.message : `HTTP ${res.status} ${res.statusText}`.trim();
  return new CommitfeedError(res.status, code, message, retryAfterMs(res), body ?? text);
}

function networkError(err: unknown): CommitfeedError {
  if (err instanceof CommitfeedError) return err;
  const e = err as Error & { cause?: { code?: string; message?: string } };
  const detail = e.cause?.code ?? e.cause?.message ?? e.message;
  return new CommitfeedError(
    0,
    'network_error',
    `no answer from the server: ${detail}`,
    undefined,
    undefined,
    {
      cause: err,
    },
  );
}

const seg = encodeURIComponent;

export class CommitfeedClient {
  readonly url: string;
  private readonly headers: Record<string, string>;
  private readonly fetch: typeof fetch;

  constructor(options: ClientOptions | string) {
    const opts = typeof options === 'string' ? { url: options } : options;
    this.url = opts.url.replace(/\/+$/, '');
    this.headers = { ...opts.headers };
    if (opts.token) this.headers.authorization = `Bearer ${opts.token}`;
    this.fetch = opts.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /** One request; a non-2xx answer throws `CommitfeedError` with the server's code. */
  async request<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
    let res: Response;
    try {
      res = await this.fetch(this.url + path, {
        method,
        headers: body === undefined ? this.headers : { ...this.headers, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal,
      });
    } catch (err) {
      throw networkError(err);
    }
    if (!res.ok) throw await errorFrom(res);
    if (res.status === 204) return undefined as T;
    return (await res.json()) as T;
  }

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
   * or pass `onEvent`. The subscription resumes by itself after any failure; it ends only when
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

  /** @internal the SSE request of a subscription. */
  openStream(
    streams: readonly string[],
    position: { lastId?: string; from?: string },
    signal: AbortSignal,
  ): Promise<Response> {
    const q = new URLSearchParams();
    // A resumed connection sends Last-Event-ID (what the server expects from EventSource too).
    if (position.lastId === undefined && position.from) q.set('from', position.from);
    // Several streams share one connection (browsers allow 6 per origin over HTTP/1.1).
    if (streams.length > 1) for (const s of streams) q.append('stream', s);
    const path = streams.length === 1 ? `/v1/streams/${seg(streams[0])}/events` : '/v1/events';
    const query = q.toString();
    const headers: Record<string, string> = { ...this.headers, accept: 'text/event-stream' };
    if (position.lastId !== undefined) headers['last-event-id'] = position.lastId;
    return this.fetch(`${this.url}${path}${query ? `?${query}` : ''}`, { headers, signal });
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

function jobBody(payload: unknown, o: EnqueueOptions): Record<string, unknown> {
  const body: Record<string, unknown> = { payload, ...o };
  if (o.runAt instanceof Date) body.runAt = o.runAt.toISOString();
  return body;
}

/** A live subscription: an async iterator of events that resumes by itself. */
export class Subscription<T = unknown> implements AsyncIterable<StreamEvent<T>> {
  /** The cursor of the last event delivered (or the primed connect point): where a reconnect resumes. */
  lastId: string | undefined;
  /** Reconnections so far. */
  reconnects = 0;
  /** With `onEvent`: settles when the subscription stops (rejects on an error it cannot retry). */
  readonly done: Promise<void>;
  private readonly abort = new AbortController();
  private iterating = false;

  constructor(
    private readonly client: CommitfeedClient,
    readonly streams: readonly string[],
    private readonly opts: SubscribeOptions<T>,
  ) {
    this.lastId = opts.after;
    if (opts.signal) {
      if (opts.signal.aborted) this.abort.abort();
      else opts.signal.addEventListener('abort', () => this.close(), { once: true });
    }
    const onEvent = opts.onEvent;
    if (onEvent) {
      this.done = (async () => {
        for await (const e of this) await onEvent(e);
      })();
      // A caller that ignores `done` must not get an unhandled rejection.
      this.done.catch(() => {});
    } else this.done = Promise.resolve();
  }

  /** Stops the subscription; the iterator ends normally. */
  close(): void {
    this.abort.abort();
  }

  get closed(): boolean {
    return this.abort.signal.aborted;
  }

  [Symbol.asyncIterator](): AsyncIterator<StreamEvent<T>> {
    if (this.iterating) throw new Error('a subscription can be iterated once');
    this.iterating = true;
    return this.run();
  }

  private async *run(): AsyncGenerator<StreamEvent<T>> {
    const { opts } = this;
    const idleMs = opts.idleTimeoutMs ?? 45_000;
    let failures = 0;
    let retryHintMs = 0;
    try {
      while (!this.closed) {
        const conn = new AbortController();
        const stop = () => conn.abort();
        this.abort.signal.addEventListener('abort', stop, { once: true });
        let idle: ReturnType<typeof setTimeout> | undefined;
        const armIdle = () => {
          if (idle) clearTimeout(idle);
          if (idleMs > 0) idle = setTimeout(() => conn.abort(), idleMs);
        };
        const disarmIdle = () => {
          if (idle) clearTimeout(idle);
          idle = undefined;
        };
        let ended: CommitfeedError;
        let delivered = false;
        let openedAt = 0;
        try {
          armIdle();
          const res = await this.client.openStream(
            this.streams,
            { lastId: this.lastId, from: opts.from },
            conn.signal,
          );
          if (res.status !== 200 || !res.body) {
            const err = await errorFrom(res);
            if (!err.retryable) throw err;
            ended = err;
            if (err.retryAfterMs !== undefined) retryHintMs = err.retryAfterMs;
          } else {
            openedAt = Date.now();
            ended = new CommitfeedError(0, 'stream_ended', 'the server ended the stream');
            const chunks = textChunks(res.body);
            const timed = (async function* () {
              for await (const c of chunks) {
                armIdle();
                yield c;
              }
            })();
            for await (const m of parseSse(timed)) {
              if (m.retry !== undefined) retryHintMs = m.retry;
              if (isPrimer(m)) {
                // The connect point: the position to resume from, no event.
                this.lastId = m.id;
                continue;
              }
              if (m.data === undefined) continue; // a retry hint
              const control = controlFrame(m);
              if (control?.kind === 'unavailable') {
                ended = new CommitfeedError(503, 'unavailable', control.message);
                break;
              }
              if (control?.kind === 'reset') {
                const info = { reason: control.reason, resumeFrom: control.resumeFrom, lastId: this.lastId };
                this.lastId = control.resumeFrom;
                opts.onReset?.(info);
                continue;
              }
              if (control) continue; // a server notice this client does not know: no event
              // On several streams the id names the event's stream after its cursor.
              const { cursor, stream = this.streams[0] } = splitEventId(m.id!);
              this.lastId = cursor;
              delivered = true;
              disarmIdle(); // the consumer's time is not the server's silence
              yield { id: cursor, stream, type: m.event ?? 'message', data: parseData(m.data) as T };
              armIdle();
            }
          }
        } catch (err) {
          if (this.closed) return;
          if (err instanceof CommitfeedError && !err.retryable) throw err;
          ended = networkError(conn.signal.aborted ? new Error('no bytes within the idle timeout') : err);
        } finally {
          disarmIdle();
          this.abort.signal.removeEventListener('abort', stop);
          conn.abort(); // release the connection whichever way we left
        }
        if (this.closed) return;
        // A connection that delivered, or stayed up a while, was healthy: start the backoff over.
        if (delivered || (openedAt > 0 && Date.now() - openedAt > 10_000)) failures = 0;
        failures++;
        const delayMs = backoffDelay(failures, retryHintMs, opts.backoff);
        this.reconnects++;
        opts.onReconnect?.({ attempt: failures, delayMs, lastId: this.lastId, error: ended });
        await sleep(delayMs, this.abort.signal);
      }
    } finally {
      this.abort.abort();
    }
  }
}

type Control =
  | { kind: 'unavailable'; message: string }
  | { kind: 'reset'; reason: string; resumeFrom: string }
  | { kind: 'other' };

/**
 * Server control frames: every event frame carries an `id:`, control frames (`unavailable`, future
 * notices) carry none. A `reset` is recognised by its body, with or without an id.
 */
function controlFrame(m: { id?: string; event?: string; data?: string }): Control | undefined {
  if (m.event === 'reset') {
    const body = parseData(m.data ?? '') as { reason?: unknown; resumeFrom?: unknown } | null;
    if (body && typeof body === 'object' && typeof body.resumeFrom === 'string') {
      return { kind: 'reset', reason: String(body.reason ?? 'reset'), resumeFrom: body.resumeFrom };
    }
  }
  if (m.id !== undefined) return undefined;
  if (m.event === 'unavailable') {
    const body = parseData(m.data ?? '') as { message?: unknown } | null;
    const message = typeof body?.message === 'string' ? body.message : 'the server is unavailable';
    return { kind: 'unavailable', message };
  }
  return { kind: 'other' };
}

function parseData(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function startWorker<T>(
  client: CommitfeedClient,
  queue: string,
  handler: (job: Job<T>, ctx: JobContext) => unknown,
  opts: WorkOptions,
): Worker {
  const concurrency = Math.max(1, opts.concurrency ?? 1);
  const lease = opts.lease ?? 30;
  const wait = opts.wait ?? 20;
  const stopping = new AbortController();
  const stats = { acked: 0, nacked: 0, lost: 0 };
  const running = new Set<Promise<void>>();
  const report = (err: unknown, job?: Job) => {
    try {
      opts.onError?.(err, job);
    } catch {
      // a throwing onError must not stop the worker
    }
  };
  if (opts.signal) {
    if (opts.signal.aborted) stopping.abort();
    else opts.signal.addEventListener('abort', () => stopping.abort(), { once: true });
  }

  const runJob = async (job: Job<T>) => {
    const lost = new AbortController();
    // Extend at half the lease: one failed extension still leaves time for another.
    const timer = setInterval(
      () => {
        client.extend(queue, job, lease).catch((err: unknown) => {
          if (err instanceof CommitfeedError && err.status === 409) {
            clearInterval(timer);
            lost.abort(err);
          }
          report(err, job);
        });
      },
      Math.max(100, (lease * 1000) / 2),
    );
    let outcome: { ok: true } | { ok: false; error: unknown };
    try {
      await handler(job, { signal: lost.signal });
      outcome = { ok: true };
    } catch (error) {
      outcome = { ok: false, error };
    } finally {
      clearInterval(timer);
    }
    if (lost.signal.aborted) {
      stats.lost++;
      return; // someone else may hold the job now: its ack or nack is theirs
    }
    try {
      if (outcome.ok) {
        await client.ack(queue, job);
        stats.acked++;
      } else {
        const e = outcome.error;
        const message = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
        await client.nack(queue, job, { error: message.slice(0, 10_000) });
        stats.nacked++;
      }
    } catch (err) {
      if (err instanceof CommitfeedError && err.status === 409) stats.lost++;
      report(err, job);
    }
  };

  const loop = async () => {
    let failures = 0;
    while (!stopping.signal.aborted) {
      const free = concurrency - running.size;
      if (free === 0) {
        await Promise.race(running);
        continue;
      }
      let jobs: Job<T>[];
      try {
        // Aborting a waiting claim on stop: a job handed out in that instant is redelivered when its
        // lease expires (at least once), never lost.
        jobs = await client.claim<T>(queue, { max: free, lease, wait }, stopping.signal);
        failures = 0;
      } catch (err) {
        if (stopping.signal.aborted) break;
        if (err instanceof CommitfeedError && !err.retryable) throw err;
        report(err);
        failures++;
        await sleep(
          backoffDelay(failures, (err as CommitfeedError).retryAfterMs ?? 0, opts.backoff),
          stopping.signal,
        );
        continue;
      }
      for (const job of jobs) {
        const p = runJob(job).finally(() => running.delete(p));
        running.add(p);
      }
    }
  };

  const done = loop().finally(async () => {
    stopping.abort();
    await Promise.allSettled([...running]);
  });
  done.catch(() => {});
  return {
    stats,
    done,
    async stop() {
      stopping.abort();
      await done.catch(() => {});
    },
  };
}
