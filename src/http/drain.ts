/**
 * Shutdown's HTTP side: every request that reached the server before shutdown began gets its answer;
 * later ones get 503 with Retry-After (and `connection: close`, so a client does not reuse a socket
 * about to go).
 *
 * Lifecycle: installed once on the app (src/app.ts). app.close() runs its preClose hook first, before
 * Fastify drops the connections: it stops accepting, calls `release` (the requests that never end on
 * their own — long-poll claims and reads — answer now), ends every SSE stream with a retry hint
 * (endSseStreams), then waits up to DRAIN_MAX_MS for the requests in flight. What a request needs
 * to finish (the batchers, the pools) is stopped only after app.close() returns (src/server.ts stops
 * its parts in reverse order, the app first). A request still in flight after the wait is logged
 * and dropped with its connection.
 */
import type { ServerResponse } from 'node:http';
import net from 'node:net';
import type { FastifyInstance } from 'fastify';
import { RETRY_AFTER_S } from '../errors.ts';
import { errorBody } from './errors.ts';
import { endSseStreams } from './sse.ts';

/** Longest wait at shutdown for requests in flight to be answered before connections are dropped. */
const DRAIN_MAX_MS = 10_000;

export function installDrain(app: FastifyInstance, opts: { retryMs: number; release: () => void }): void {
  let shuttingDown = false;
  /** The answers of the requests in flight (SSE streams too), until their response closes. */
  const inFlight = new Set<ServerResponse>();
  let idle: (() => void) | undefined;
  // One listener function for every response (`this` is the response), not a closure and a `once`
  // wrapper per request: this runs on every request.
  function closed(this: ServerResponse): void {
    inFlight.delete(this);
    if (inFlight.size === 0) idle?.();
  }
  // Callback hooks, not async ones: they run on every request, and an async hook costs a promise
  // and a microtask turn each time.
  app.addHook('onRequest', (request, reply, done) => {
    if (shuttingDown) {
      // An EventSource takes any answer but 200 as final and never reconnects, where a dropped
      // connection it retries (after `retry:`, with Last-Event-ID): a stream request that reached a
      // kept-alive socket of a server on its way down (the browser reconnecting after the retry
      // hint) is dropped, not refused.
      if (request.headers.accept?.includes('text/event-stream')) {
        reply.hijack();
        request.raw.socket.destroy();
        return;
      }
      reply.header('retry-after', String(RETRY_AFTER_S)).header('connection', 'close');
      // Answered here: `done` is not called, so the request goes no further.
      reply
        .code(503)
        .send(
          errorBody(
            503,
            'shutting_down',
            'this server is shutting down; retry (another replica, or here after restart)',
          ),
        );
      return;
    }
    inFlight.add(reply.raw);
    // A response emits 'close' once.
    reply.raw.on('close', closed);
    done();
  });
  app.addHook('preClose', async () => {
    shuttingDown = true;
    // No new connections from here (refused, which a client can tell). Only the listening socket
    // closes: http's own close() would also drop idle keep-alive sockets now, resetting a request
    // a client is sending on one at this moment; they get a 503 with `connection: close` instead,
    // and Fastify drops what is left once preClose is done. (Its own close of the server later
    // finds it closed already.) One turn of the event loop first: its poll phase accepts the
    // connections the kernel has queued by now, which closing the listening socket would reset
    // (their requests get the 503 above); only those arriving in that turn are still reset.
    await new Promise<void>((resolve) => setImmediate(resolve));
    if (app.server.listening) net.Server.prototype.close.call(app.server);
    // The answers still to come close their connection (no onSend hook on every request for it):
    // Node sends `connection: close` for a response that is not kept alive.
    for (const res of inFlight) if (!res.headersSent) res.shouldKeepAlive = false;
    opts.release();
    endSseStreams(app, opts.retryMs);
    if (inFlight.size > 0) {
      await new Promise<void>((resolve) => {
        idle = resolve;
        setTimeout(resolve, DRAIN_MAX_MS).unref();
      });
      if (inFlight.size > 0)
        app.log.warn({ inFlight: inFlight.size }, 'shutdown: requests still in flight after the drain wait');
    }
  });
}
