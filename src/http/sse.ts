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
import type { Sink } from '../feed/hub.ts';

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
  res.write(`retry: ${retryMs}\n${first}`);
  return responseSink(res);
}

function responseSink(res: ServerResponse): Sink {
  let drain: Promise<void> | undefined;
  return {
    // After end (a HEAD, or a stream ended while a write was queued), writes are dropped.
    write: (chunk) => !res.destroyed && !res.writableEnded && res.write(chunk),
    drained() {
      if (res.destroyed || res.writableEnded) return Promise.resolve();
      drain ??= new Promise<void>((resolve) => {
        const done = () => {
          res.off('drain', done);
          res.off('close', done);
          drain = undefined;
          resolve();
        };
        res.on('drain', done);
        res.on('close', done);
      });
      return drain;
    },
    end(chunk) {
      if (res.writableEnded) return;
      if (chunk) res.end(chunk);
      else res.end();
    },
    destroy: () => res.destroy(),
    buffered: () => res.writableLength,
  };
}
