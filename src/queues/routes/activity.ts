/** GET /v1/queues/:queue/events: a queue's activity (its wake-up rows) over SSE. */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { authorizeQueueRead } from '../../auth/policy.ts';
import { START, formatCursor } from '../../feed/cursor.ts';
import { givenCursor, notInFeedOpening, placeCursor, safePosition } from '../../http/read-position.ts';
import { openSseStream, primerFrame } from '../../http/sse.ts';
import { queueParams } from '../schemas.ts';
import { watchQuery, watchResponse } from '../schemas/activity.ts';
import { queueStream } from '../wake-stream.ts';
import { QUEUE_TAGS, type QueueReq, type QueueRouteDeps } from './shared.ts';

type WatchReq = QueueReq & { Querystring: { after?: string; from: 'earliest' | 'latest' } };

export function activityRoutes(app: FastifyInstance, deps: QueueRouteDeps): void {
  app.get<WatchReq>(
    '/v1/queues/:queue/events',
    {
      schema: {
        tags: QUEUE_TAGS,
        summary: 'Watch queue activity over SSE: enqueued, retry, dead, resumed',
        params: queueParams,
        querystring: watchQuery,
        response: watchResponse,
      },
    },
    (request, reply) => watch(deps, request, reply),
  );
}

async function watch(deps: QueueRouteDeps, request: FastifyRequest<WatchReq>, reply: FastifyReply) {
  const { config, feed } = deps;
  // Watching a queue: like its stats (enqueue, work or admin), whatever the cursor.
  authorizeQueueRead(request, request.params.queue);
  const start = givenCursor(request, request.query.after);
  // A cursor from another history: an in-band `reset`, then on from UNKNOWN_CURSOR_RESUME's position.
  const notInFeed = start === undefined ? undefined : await placeCursor(feed, config, start);
  const from =
    notInFeed?.resumeFrom ??
    start ??
    (request.query.from === 'earliest' ? START : await safePosition(feed, config.startWaitMs));
  const tag = feed.history.tag;
  const stream = openSseStream(request, reply, {
    retryMs: config.sseRetryMs,
    first: notInFeed === undefined ? primerFrame(formatCursor(from, tag)) : notInFeedOpening(feed, notInFeed),
    room: { hub: feed.hub, max: config.maxSseConnections },
    maxPerToken: config.maxSsePerToken,
  });
  const subscriber = feed.hub.subscribe([queueStream(request.params.queue)], from, stream.sink);
  stream.onClose(() => feed.hub.unsubscribe(subscriber));
  return reply;
}
