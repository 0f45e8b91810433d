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
import net, { type Socket } from 'node:net';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { RETRY_AFTER_S } from '../errors.ts';
import { errorBody } from './errors.ts';
import { endSseStreams, wantsSse } from './sse.ts';

/** Longest wait at shutdown for requests in flight to be answered before connections are dropped. */
const DRAIN_MAX_MS = 10_000;

/** A request that reached a server on its way down. */
function refuse(request: FastifyRequest, reply: FastifyReply): void {
  // An EventSource takes any answer but 200 as final and never reconnects, where a dropped
  // connection it retries (after `retry:`, with Last-Event-ID): a stream request that reached a
  // kept-alive socket of a server on its way down (the browser reconnecting after the retry
  // hint) is dropped, not refused.
  if (wantsSse(request)) {
    reply.hijack();
    request.raw.socket.destroy();
    return;
  }
  reply.header('retry-after', String(RETRY_AFTER_S)).header('connection', 'close');
  reply
    .code(503)
    .send(
      errorBody(
        503,
        'shutting_down',
        'this server is shutting down; retry (another replica, or here after restart)',
      ),
    );
}

export function installDrain(app: FastifyInstance, opts: { retryMs: number; release: () => void }): void {
  let shuttingDown = false;
  /** Requests in flight (SSE streams too), until their response closes. */
  let inFlight = 0;
  /** Each open connection that has carried a request → its latest answer while that is in flight
   * (null between requests). Keyed by connection, not by answer: a Set of answers adds and deletes
   * an entry per request, and V8 rebuilds a hash table with that churn every few dozen requests; an
   * obsolete table still points at the answers it held and at the next table, so once one is old
   * enough to be promoted, the whole chain and every answer in it (request, response, body, socket
   * buffers) is promoted at each young collection until the next full one: ~2 KB per publish
   * (bench/HISTORY.md, "Promoted garbage"). Here a request only overwrites its connection's value. */
  const answers = new Map<Socket, ServerResponse | null>();
  let idle: (() => void) | undefined;
  // One listener function for every response (`this` is the response), not a closure and a `once`
  // wrapper per request: this runs on every request.
  function closed(this: ServerResponse): void {
    inFlight--;
    const socket = this.req.socket;
    if (answers.get(socket) === this) answers.set(socket, null);
    if (inFlight === 0) idle?.();
  }
  function connectionClosed(this: Socket): void {
    answers.delete(this);
  }
  // Callback hooks, not async ones: they run on every request, and an async hook costs a promise
  // and a microtask turn each time.
  app.addHook('onRequest', (request, reply, done) => {
    if (shuttingDown) {
      // Answered or dropped here: `done` is not called, so the request goes no further.
      refuse(request, reply);
      return;
    }
    const socket = request.raw.socket;
    if (!answers.has(socket)) socket.once('close', connectionClosed);
    answers.set(socket, reply.raw);
    inFlight++;
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
    for (const res of answers.values()) if (res !== null && !res.headersSent) res.shouldKeepAlive = false;
    opts.release();
    endSseStreams(app, opts.retryMs);
    if (inFlight > 0) {
      await new Promise<void>((resolve) => {
        idle = resolve;
        setTimeout(resolve, DRAIN_MAX_MS).unref();
      });
      if (inFlight > 0) app.log.warn({ inFlight }, 'shutdown: requests still in flight after the drain wait');
    }
  });
}
