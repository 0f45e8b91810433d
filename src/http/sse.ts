/**
 * SSE over a raw Node response: headers, the opening `retry:` hint and primed `id:`, and a Sink with
 * backpressure for the hub. Everything that can fail is checked before `open` is called: once the
 * 200 is sent, errors end the stream with an event and a `retry:` hint instead (browsers'
 * EventSource gives up forever on a non-200).
 *
 * A HEAD request (Fastify answers HEAD with the GET handler) gets the stream's status and headers and
 * ends at once: Node drops the body writes of a HEAD response, and with them the headers, which go
 * out with the first body byte, so an open-ended stream would never answer. Its sink is already
 * ended; the route's close handler frees what it took (hub subscription, connection slot).
 */
import type { ServerResponse } from 'node:http';
import type { FastifyReply } from 'fastify';
import type { Hub, Sink } from '../feed/hub.ts';
import { unavailable } from '../errors.ts';

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

/** Takes over the response and starts the stream: a `retry:` hint, then the priming frame. */
export function openSse(
  reply: FastifyReply,
  primedId: string,
  retryMs: number,
  /** The first frame after `retry:` (default: the priming frame of primedId). */
  first: string = primerFrame(primedId),
): Sink {
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

/**
 * The hub's Sink over a response. A class rather than an object of closures: a server holding
 * 10,000 streams keeps one of these per connection, and methods on the prototype cost nothing each.
 */
class ResponseSink implements Sink {
  private drain: Promise<void> | undefined;

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
  write(chunk: string): boolean {
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

  destroy(): void {
    this.res.destroy();
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
export function assertSseRoom(hub: Hub, max: number): void {
  if (hub.subscriberCount >= max) {
    throw unavailable(
      'too_many_connections',
      `this server already serves ${max} SSE connections (MAX_SSE_CONNECTIONS); retry later or use another replica`,
    );
  }
}
