/**
 * A `Subscription` (what `subscribe` returns): a subscriber seen from the client, SSE over fetch that
 * resumes by itself. After *any* failure — a dropped connection, a server restart, a non-200 answer,
 * the server's `event: unavailable`, no bytes within the idle timeout — it reconnects with exponential
 * backoff capped at a few seconds (backoff.ts) and `Last-Event-ID` set to the last id it saw, including the id the server primes at
 * connect. Nothing is lost or repeated. An `event: reset` (the cursor fell behind retention, or is
 * not in the feed's history) moves the cursor to the server's `resumeFrom` and tells `onReset`:
 * native `EventSource` cannot follow either of those. Cursors are passed through as the server wrote
 * them (tagged with the feed: `<txid>-<id>.<tag>`).
 */
import { type BackoffOptions, backoffDelay, sleep } from './backoff.ts';
import { CommitfeedError, errorFrom, networkError } from './errors.ts';
import type { HttpClient } from './http.ts';
import { isPrimer, parseSse, splitEventId, textChunks } from './sse.ts';

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
  /** `trimmed` (retention passed the cursor), `ahead` or `foreign` (the cursor is not in this feed's
   * history: docs/streams.md#cursors-from-another-history). */
  reason: string;
  /** The cursor the `Subscription` continues from. */
  resumeFrom: string;
  /** The cursor the `Subscription` was at when the server reset it. */
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

export interface SubscribeOptions<T = unknown> {
  /** Where to start when `after` is not given: `latest` (default) or `earliest`. */
  from?: 'earliest' | 'latest';
  /** Start after this cursor (exclusive). */
  after?: string;
  /**
   * Push instead of pull: each event is handed to `onEvent` (awaited, so a slow handler slows the
   * stream instead of buffering it), and the `Subscription` runs without being iterated. Its `done`
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
  /** Stops the `Subscription` (like `close()`). */
  signal?: AbortSignal;
}

/** How one connection went: what ended it, whether it delivered an event, when it opened (0: never). */
interface Attempt {
  ended?: CommitfeedError;
  delivered: boolean;
  openedAt: number;
}

/** A subscriber, client side: an async iterator of events that resumes by itself (a connection at a time). */
export class Subscription<T = unknown> implements AsyncIterable<StreamEvent<T>> {
  /** The cursor of the last event delivered (or the primed connect point): where a reconnect resumes. */
  lastId: string | undefined;
  /** Reconnections so far. */
  reconnects = 0;
  /** With `onEvent`: settles when the `Subscription` stops (rejects on an error it cannot retry). */
  readonly done: Promise<void>;
  private readonly abort = new AbortController();
  private iterating = false;
  /** The server's latest `retry:` or `Retry-After`: no reconnect comes sooner. */
  private retryHintMs = 0;

  constructor(
    private readonly client: HttpClient,
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

  /** Stops the `Subscription`; the iterator ends normally. */
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

  /** Connection after connection, until closed or an error no retry can fix. */
  private async *run(): AsyncGenerator<StreamEvent<T>> {
    let failures = 0;
    try {
      while (!this.closed) {
        const attempt: Attempt = { delivered: false, openedAt: 0 };
        yield* this.connect(attempt);
        if (this.closed) return;
        // A connection that delivered, or stayed up a while, was healthy: start the backoff over.
        const healthy = attempt.delivered || (attempt.openedAt > 0 && Date.now() - attempt.openedAt > 10_000);
        if (healthy) failures = 0;
        failures++;
        await this.backOff(failures, attempt.ended!);
      }
    } finally {
      this.abort.abort();
    }
  }

  /** One connection: its events, until it ends; `attempt` records how it went. */
  private async *connect(attempt: Attempt): AsyncGenerator<StreamEvent<T>> {
    const conn = new AbortController();
    const stop = () => conn.abort();
    this.abort.signal.addEventListener('abort', stop, { once: true });
    const idle = new IdleTimer(this.opts.idleTimeoutMs ?? 45_000, stop);
    try {
      idle.arm();
      const position = { lastId: this.lastId, from: this.opts.from };
      const res = await this.client.openStream(this.streams, position, conn.signal);
      if (res.status !== 200 || !res.body) {
        const err = await errorFrom(res);
        if (!err.retryable) throw err;
        attempt.ended = err;
        if (err.retryAfterMs !== undefined) this.retryHintMs = err.retryAfterMs;
      } else {
        attempt.openedAt = Date.now();
        attempt.ended = new CommitfeedError(0, 'stream_ended', 'the server ended the stream');
        yield* this.read(res.body, attempt, idle);
      }
    } catch (err) {
      if (this.closed) return;
      if (err instanceof CommitfeedError && !err.retryable) throw err;
      attempt.ended = networkError(conn.signal.aborted ? new Error('no bytes within the idle timeout') : err);
    } finally {
      idle.disarm();
      this.abort.signal.removeEventListener('abort', stop);
      conn.abort(); // release the connection whichever way we left
    }
  }

  /** The frames of an open stream: events are yielded; the primer and control frames move the cursor. */
  private async *read(
    body: ReadableStream<Uint8Array>,
    attempt: Attempt,
    idle: IdleTimer,
  ): AsyncGenerator<StreamEvent<T>> {
    for await (const m of parseSse(idle.watch(textChunks(body)))) {
      if (m.retry !== undefined) this.retryHintMs = m.retry;
      if (isPrimer(m)) {
        // The connect point: the position to resume from, no event.
        this.lastId = m.id;
        continue;
      }
      if (m.data === undefined) continue; // a retry hint
      const control = controlFrame(m);
      if (control?.kind === 'unavailable') {
        attempt.ended = new CommitfeedError(503, 'unavailable', control.message);
        break;
      }
      if (control?.kind === 'reset') {
        const info = { reason: control.reason, resumeFrom: control.resumeFrom, lastId: this.lastId };
        this.lastId = control.resumeFrom;
        this.opts.onReset?.(info);
        continue;
      }
      if (control) continue; // a server notice this client does not know: no event
      // On several streams the id names the event's stream after its cursor.
      const { cursor, stream = this.streams[0] } = splitEventId(m.id!);
      this.lastId = cursor;
      attempt.delivered = true;
      idle.disarm(); // the consumer's time is not the server's silence
      yield { id: cursor, stream, type: m.event ?? 'message', data: parseData(m.data) as T };
      idle.arm();
    }
  }

  /** Waits before the next connection, telling `onReconnect` first. */
  private async backOff(failures: number, ended: CommitfeedError): Promise<void> {
    const delayMs = backoffDelay(failures, this.retryHintMs, this.opts.backoff);
    this.reconnects++;
    this.opts.onReconnect?.({ attempt: failures, delayMs, lastId: this.lastId, error: ended });
    await sleep(delayMs, this.abort.signal);
  }
}

/** Ends a connection that delivers no bytes for `ms` (0: never). */
class IdleTimer {
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly ms: number,
    private readonly onIdle: () => void,
  ) {}

  arm(): void {
    if (this.timer) clearTimeout(this.timer);
    if (this.ms > 0) this.timer = setTimeout(this.onIdle, this.ms);
  }

  disarm(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** The chunks as they come, each one re-arming the timer. */
  async *watch(chunks: AsyncIterable<string>): AsyncGenerator<string> {
    for await (const c of chunks) {
      this.arm();
      yield c;
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
