/**
 * SSE over a raw Node response, the same for every streaming route (streams, queue activity, the
 * Mercure hub, the live page): openSseStream checks what can refuse a stream while a 4xx/503 can
 * still be sent, then sends the headers, the opening `retry:` hint and the first frame, and gives
 * the route a Sink with backpressure for the hub. Once the 200 is sent, errors end the stream with
 * an event and a `retry:` hint instead (browsers' EventSource gives up forever on a non-200). A route
 * whose stream is subscribed to the feed opens it through feed-sse.ts, which decides where it starts
 * (and answers 200 while that needs a database that does not answer).
 *
 * Lifecycle: a stream lives until its client leaves, its token expires, or shutdown ends it
 * (endSseStreams, called first in the server's preClose); each of these runs the route's onClose
 * callbacks once. A HEAD request (Fastify answers HEAD with the GET handler) gets the stream's
 * status and headers and ends at once: Node drops the body writes of a HEAD response, and with them
 * the headers, which go out with the first body byte, so an open-ended stream would never answer.
 */
import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { admitSse } from '../auth/sse-admission.ts';
import type { Hub } from '../feed/hub.ts';
import { socketInode } from '../feed/send-queues.ts';
import type { Sink } from '../feed/subscriber.ts';
import { ApiError, unavailable } from '../errors.ts';
import { timerDelay } from '../timers.ts';

export const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache, no-transform',
  connection: 'keep-alive',
  // Tells nginx-style proxies not to buffer the stream.
  'x-accel-buffering': 'no',
};

/**
 * The first frame of every stream: the connect point as an `id:`, so a client that drops before its
 * first event still resumes from there. It carries an empty `data:` because clients built on
 * eventsource-parser (the `eventsource` npm package) only take an id from a frame that has data; it
 * is named, so browsers' `onmessage` never sees it (they set lastEventId from it either way).
 */
export function primerFrame(primedId: string): string {
  return `id: ${primedId}\nevent: ${PRIMED_EVENT}\ndata:\n\n`;
}

/** The event name of the priming frame (see primerFrame). */
export const PRIMED_EVENT = 'primed';

/** How an SSE route's stream opens and when it ends early (see openSseStream). */
export interface SseStreamOptions {
  retryMs: number;
  /** The first frame after `retry:`: a priming `id:`, or a route's own opening frame. */
  first: string;
  /** Counted against MAX_SSE_CONNECTIONS with the other streams opened with the same hub's room,
   * from open to close, whether or not they are subscribed yet (503 over it). */
  room?: { hub: Hub; max: number };
  /** The per-token limit of MAX_SSE_PER_TOKEN (429 over it), and the end of the stream with
   * `event: auth-expired` when the request's token stops being accepted. */
  maxPerToken?: number;
  /** An end of the stream at a given time, with a closing frame (a Mercure token's `exp`). */
  expires?: { atMs: number; frame: string };
}

/**
 * One open SSE stream. `onClose` callbacks run once, when the client leaves or the stream is ended
 * here (expiry, shutdown): a route frees what the stream holds (its hub subscriber) in one of them.
 */
export interface SseStream {
  readonly sink: Sink;
  /** True once the client left or the stream was ended (the `onClose` callbacks have run). */
  readonly closed: boolean;
  onClose(fn: () => void): void;
  /** Ends the stream with a last chunk (a `retry:` hint, an expiry event) and runs the callbacks. */
  end(chunk: string): void;
}

/**
 * The open streams of each HTTP server, so shutdown ends them all with one `retry:` hint
 * (endSseStreams). Keyed by the node server, which every plugin context of an app shares.
 */
const openStreams = new WeakMap<object, Set<SseStream>>();

/**
 * The one way an SSE route starts its stream. Everything that can refuse it is checked first, while
 * an error can still be a 4xx/503 answer: the process's connection room, then the token's. Then it
 * takes over the response, sends the headers (with any the route set on `reply`), `retry:` and the
 * first frame, and arms the ends the options ask for.
 *
 * @example const stream = openSseStream(request, reply, { retryMs, first: primerFrame(id), room, maxPerToken });
 *          const subscriber = hub.subscribe(streams, start, stream.sink);
 *          stream.onClose(() => hub.unsubscribe(subscriber));
 */
export function openSseStream(
  request: FastifyRequest,
  reply: FastifyReply,
  opts: SseStreamOptions,
): SseStream {
  if (opts.room) assertSseRoom(opts.room.hub, opts.room.max);
  const started = opts.maxPerToken === undefined ? undefined : admitSse(request, reply, opts.maxPerToken);
  const stream = new ResponseStream(startResponse(reply, opts.retryMs, opts.first));
  if (opts.room) enterRoom(stream, opts.room.hub);
  const registry = openStreams.get(request.server.server) ?? new Set<SseStream>();
  openStreams.set(request.server.server, registry);
  registry.add(stream);
  stream.onClose(() => registry.delete(stream));
  reply.raw.on('close', () => stream.finish());
  started?.((frame) => stream.end(frame));
  if (opts.expires) {
    const { atMs, frame } = opts.expires;
    const timer = setTimeout(() => stream.end(frame), timerDelay(atMs - Date.now()));
    timer.unref();
    stream.onClose(() => clearTimeout(timer));
  }
  return stream;
}

/** Ends every SSE stream `app` serves with a `retry:` hint (the first step of shutdown). */
export function endSseStreams(app: FastifyInstance, retryMs: number): void {
  for (const stream of [...(openStreams.get(app.server) ?? [])]) {
    stream.end(`retry: ${retryMs}\n: server shutting down\n\n`);
  }
}

/** True when the request takes an SSE answer (EventSource and the TypeScript client ask for one). */
export function wantsSse(request: FastifyRequest): boolean {
  return (request.headers.accept ?? '').includes('text/event-stream');
}

/**
 * Refuses, before anything is read, a request that does not take SSE where only SSE is served (`what`
 * names it): a stream its client cannot read would be held open for nothing. 406 `sse_only` unless
 * the route has its own `status` and `code` for it.
 */
export function requireSse(request: FastifyRequest, what: string, status = 406, code = 'sse_only'): void {
  if (wantsSse(request)) return;
  throw new ApiError(status, code, `${what} is served over SSE only: send Accept: text/event-stream`);
}

/** Counts `stream` in `hub`'s room until it closes. */
function enterRoom(stream: SseStream, hub: Hub): void {
  hub.openStreams++;
  stream.onClose(() => hub.openStreams--);
}

class ResponseStream implements SseStream {
  private callbacks: (() => void)[] | undefined = [];

  constructor(readonly sink: Sink) {}

  /** True once the client left or the stream was ended here. */
  get closed(): boolean {
    return this.callbacks === undefined;
  }

  onClose(fn: () => void): void {
    if (this.callbacks) this.callbacks.push(fn);
    else fn();
  }

  end(chunk: string): void {
    this.sink.end(chunk);
    this.finish();
  }

  /** Runs the callbacks, once. */
  finish(): void {
    const callbacks = this.callbacks;
    this.callbacks = undefined;
    for (const fn of callbacks ?? []) fn();
  }
}

/** Takes over the response and starts the stream: headers, a `retry:` hint, then `first`. */
function startResponse(reply: FastifyReply, retryMs: number, first: string): Sink {
  reply.hijack();
  const res = reply.raw;
  res.writeHead(200, { ...SSE_HEADERS, ...(reply.getHeaders() as Record<string, string>) });
  if (reply.request.method === 'HEAD') {
    res.end();
    return responseSink(res);
  }
  // Headers on their own first: written alone, the header block is flattened by the socket write,
  // where sent with the first chunk it stays the tree of ~25 string pieces Node built it from, held
  // by the response for the life of the stream (~0.8 KB on each of 10,000 connections).
  res.flushHeaders();
  res.write(`retry: ${retryMs}\n${first}`);
  return responseSink(res);
}

/** A socket with the internal counters socketBytes reads (absent on a closed or non-TCP socket). */
type CountedSocket = Socket & {
  _bytesDispatched?: number;
  _handle?: { fd?: number; writeQueueSize?: number } | null;
};

/**
 * The hub's Sink over a response. A class rather than an object of closures: a server holding
 * 10,000 streams keeps one of these per connection, and methods on the prototype cost nothing each.
 */
class ResponseSink implements Sink {
  private drain: Promise<void> | undefined;
  private id: { inode: number; ipv6: boolean } | undefined;

  constructor(private readonly res: ServerResponse) {}

  // After end (a HEAD, or a stream ended while a write was queued), writes are dropped.
  //
  // The cork around the write is for memory, not batching. Left alone, Node corks the socket on a
  // response's write and uncorks it on the next tick, so the four pieces of a chunked write (size,
  // CRLF, frame, CRLF) wait in the socket's buffer until then. A fan-out writes to every subscriber
  // in one tick: with 10,000 streams, 40,000 pieces outlive the young generation, are promoted, and
  // sit in the old generation as garbage until a major GC (peak RSS ~13–32 KiB per connection). Corked
  // here, Node skips its own cork, and the uncork hands the frame to the socket at once; a socket
  // that cannot take it keeps it buffered as before (backpressure is unchanged).
  write(chunk: string | Uint8Array): boolean {
    const res = this.res;
    if (res.destroyed || res.writableEnded) return false;
    const socket = res.socket;
    if (!socket) return res.write(chunk);
    socket.cork();
    const ok = res.write(chunk);
    socket.uncork();
    return ok;
  }

  drained(): Promise<void> {
    const res = this.res;
    if (res.destroyed || res.writableEnded) return Promise.resolve();
    this.drain ??= new Promise<void>((resolve) => {
      const done = () => {
        res.off('drain', done);
        res.off('close', done);
        this.drain = undefined;
        resolve();
      };
      res.on('drain', done);
      res.on('close', done);
    });
    return this.drain;
  }

  end(chunk?: string): void {
    if (this.res.writableEnded) return;
    if (chunk) this.res.end(chunk);
    else this.res.end();
  }

  // An RST, not a FIN: a peer that stopped reading would keep the send queue (up to the kernel's
  // buffer, hundreds of KiB) pinned in FIN_WAIT until it reads or times out; reset, it goes now.
  // A TLS socket has no TCP handle of its own to reset: it is destroyed (a FIN).
  reset(): void {
    const socket = this.res.socket;
    if (socket && !socket.destroyed) {
      try {
        socket.resetAndDestroy();
        return;
      } catch {}
    }
    this.res.destroy();
  }

  socketId(): { inode: number; ipv6: boolean } {
    if (this.id === undefined) {
      const socket = this.res.socket as CountedSocket | null;
      this.id = { inode: socketInode(socket?._handle?.fd), ipv6: socket?.remoteFamily === 'IPv6' };
    }
    return this.id;
  }

  // From the socket's counters: bytesWritten is what was handed to it, _bytesDispatched of that what
  // went to libuv, whose writeQueueSize the kernel has not taken yet. writableLength alone would
  // count a write the kernel took in part twice (in Node's length and in the kernel's queue): a
  // stalled socket's last big write is mostly in the kernel. bytesWritten walks Node's queued
  // chunks, which the hub keeps short past a full socket. Without the internal counters (another
  // Node), that double count is the fallback: an over-estimate, so drops come early, never late.
  socketBytes(): { unsent: number; handed: number } {
    const res = this.res;
    const socket = res.socket as CountedSocket | null;
    if (!socket || socket.destroyed) return { unsent: 0, handed: 0 };
    const before = res.writableLength - socket.writableLength; // the response's own queue
    const dispatched = socket._bytesDispatched;
    const queued = socket._handle?.writeQueueSize;
    if (typeof dispatched !== 'number' || typeof queued !== 'number') {
      return { unsent: res.writableLength, handed: socket.bytesWritten - socket.writableLength };
    }
    const handed = dispatched - queued;
    return { unsent: before + socket.bytesWritten - handed, handed };
  }

  buffered(): number {
    return this.res.writableLength;
  }
}

/** The Sink of a response whose headers are sent (exported for test/sse-sink.test.ts). */
export function responseSink(res: ServerResponse): Required<Sink> {
  return new ResponseSink(res);
}

/**
 * Refuses a new SSE stream when this process already serves `max` (MAX_SSE_CONNECTIONS): 503 with
 * Retry-After before the stream starts, so the client tries again later or on another replica.
 */
function assertSseRoom(hub: Hub, max: number): void {
  if (hub.openStreams >= max) {
    throw unavailable(
      'too_many_connections',
      `this server already serves ${max} SSE connections (MAX_SSE_CONNECTIONS); retry later or use another replica`,
    );
  }
}
