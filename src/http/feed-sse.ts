/**
 * The feed-backed SSE stream, one sequence for every route that subscribes a stream to the feed
 * (native streams and globs, a queue's activity, the Mercure hub): decide where it starts (the
 * cursor's history check, a `latest` position, a Mercure id's lookup), open the stream with that
 * opening (its priming id; a `reset` when the cursor is not in this feed), subscribe it to the hub
 * from there, unsubscribe when it closes.
 *
 * Open first, decide in-band. Deciding may need the database, and an SSE request is answered 200 for
 * every transient condition: EventSource gives up for good on any other answer. A start decided
 * within OPEN_WAIT_MS opens the stream with it (and its headers). Otherwise — the database
 * unreachable, the horizon held past START_WAIT, or a slow answer — the stream opens at once with
 * what is already certain (`provisional`: the cursor the request named, as its priming id), says in a
 * comment that it waits, and the decision is retried until it is made or the client leaves; then
 * the opening follows and delivery starts, as if it had been decided before the headers. Only what
 * is certain before the stream starts (a malformed cursor, a refused token: the route's own checks;
 * the connection limits: openSseStream's) is answered with another status.
 *
 * Lifecycle: a stream still deciding counts against MAX_SSE_CONNECTIONS and is ended at shutdown
 * like any open stream (sse.ts); it sends a heartbeat every HEARTBEAT_INTERVAL while it waits (the
 * hub's heartbeat reaches only subscribed streams), and its retries stop when it closes. A decision
 * that fails for another reason than a transient one (a bug) ends it with `event: unavailable`.
 */
import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../config/config.ts';
import { isUnavailable } from '../db/commit-outcome.ts';
import { ApiError, ShuttingDownError } from '../errors.ts';
import type { Cursor } from '../feed/cursor.ts';
import type { Feed } from '../feed/feed.ts';
import { unavailableFrame } from '../feed/frames.ts';
import type { Sink } from '../feed/subscriber.ts';
import { type SseStream, type SseStreamOptions, openSseStream } from './sse.ts';

/** How long a request waits for its start to be decided before its stream opens without it. */
const OPEN_WAIT_MS = 1000;
/** Pauses between the in-band attempts to decide: the first, doubling up to the last. */
const RETRY_FIRST_MS = 100;
const RETRY_MAX_MS = 2000;

/** Said once on a stream whose start waits for the database. */
const WAITING = ': waiting for the database to decide where this stream starts; events follow\n\n';

/** Where a feed-backed stream starts and what it says first. */
export interface FeedStart {
  /** The subscriber gets the events after this position. */
  after: Cursor;
  /** The frames before any event: the priming id, and a `reset` when the cursor is not in this feed. */
  opening: string;
  /** Response headers that go with this start; sent only when it was decided before the stream opened. */
  headers?: Record<string, string>;
}

export interface FeedSseOptions<S extends FeedStart> {
  feed: Feed;
  config: Pick<Config, 'sseRetryMs' | 'maxSseConnections' | 'heartbeatMs'>;
  /** What the stream may say before its start is decided (the named cursor as a priming id; '': none). */
  provisional: string;
  /** MAX_SSE_PER_TOKEN and the end at token expiry (openSseStream). */
  maxPerToken?: number;
  /** An end at a given time (openSseStream). */
  expires?: SseStreamOptions['expires'];
  /** Where the stream starts; may need the database (a transient failure is retried in-band). */
  decide(): Promise<S>;
  /** Subscribes `sink` from the decided start; returns what ends the subscription. */
  subscribe(start: S, sink: Sink): () => void;
}

type Settled<S> = { start: S; error?: undefined } | { start?: undefined; error: unknown };

/**
 * Serves a feed-backed SSE request (see the header). The route has checked what can refuse it.
 *
 * @example return openFeedSse(request, reply, { feed, config, provisional, decide: () => sseStart(...),
 *            subscribe: (start, sink) => { const s = feed.hub.subscribe(streams, start.after, sink);
 *                                          return () => feed.hub.unsubscribe(s); } });
 */
export async function openFeedSse<S extends FeedStart>(
  request: FastifyRequest,
  reply: FastifyReply,
  opts: FeedSseOptions<S>,
): Promise<FastifyReply> {
  const first = settle(opts.decide());
  const early = await beforeOpen(first);
  if (early?.error !== undefined && !isTransient(early.error)) throw early.error;
  const decided = early?.start;
  if (decided?.headers) reply.headers(decided.headers);
  const stream = openSseStream(request, reply, {
    retryMs: opts.config.sseRetryMs,
    first: decided?.opening ?? opts.provisional,
    room: { hub: opts.feed.hub, max: opts.config.maxSseConnections },
    maxPerToken: opts.maxPerToken,
    expires: opts.expires,
  });
  if (decided) stream.onClose(opts.subscribe(decided, stream.sink));
  else void decideInBand(stream, first, opts, request.log);
  return reply;
}

/** The first decision, or undefined when it takes longer than OPEN_WAIT_MS. */
async function beforeOpen<S>(first: Promise<Settled<S>>): Promise<Settled<S> | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), OPEN_WAIT_MS);
  });
  try {
    return await Promise.race([first, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Decides on the open stream (`pending`: the first attempt, failed or still running), then subscribes it. */
async function decideInBand<S extends FeedStart>(
  stream: SseStream,
  pending: Promise<Settled<S>> | undefined,
  opts: FeedSseOptions<S>,
  log: FastifyBaseLogger,
): Promise<void> {
  const beat = setInterval(() => stream.sink.write(':\n\n'), opts.config.heartbeatMs);
  beat.unref();
  let said = false;
  try {
    for (let pause = RETRY_FIRST_MS; !stream.closed; pause = Math.min(pause * 2, RETRY_MAX_MS)) {
      const { start, error } = await (pending ?? settle(opts.decide()));
      pending = undefined;
      if (stream.closed) return;
      if (start !== undefined) {
        stream.sink.write(start.opening);
        stream.onClose(opts.subscribe(start, stream.sink));
        return;
      }
      if (!isTransient(error)) {
        log.error({ err: error }, 'deciding where an SSE stream starts failed');
        stream.end(
          unavailableFrame('internal', 'the stream could not start; reconnect', opts.config.sseRetryMs),
        );
        return;
      }
      if (!said) stream.sink.write(WAITING);
      said = true;
      // Jittered, so the streams of one outage do not ask all at once when it ends.
      await sleep(pause * (0.75 + Math.random() * 0.5));
    }
  } finally {
    clearInterval(beat);
  }
}

function settle<S>(p: Promise<S>): Promise<Settled<S>> {
  return p.then(
    (start) => ({ start }),
    (error: unknown) => ({ error }),
  );
}

/** A failure that waiting cures: the database unreachable, a 503 (the horizon held), shutdown. */
function isTransient(err: unknown): boolean {
  return (
    isUnavailable(err) ||
    err instanceof ShuttingDownError ||
    (err instanceof ApiError && err.statusCode === 503)
  );
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
