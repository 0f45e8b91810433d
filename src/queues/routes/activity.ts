/** GET /v1/queues/:queue/events: a queue's activity (its wake-up rows) over SSE only (406 otherwise). */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { authorizeQueueRead } from '../../auth/policy.ts';
import { openFeedSse } from '../../http/feed-sse.ts';
import { givenCursor, givenPrimer, sseStart } from '../../http/read-position.ts';
import { requireSse } from '../../http/sse.ts';
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

function watch(deps: QueueRouteDeps, request: FastifyRequest<WatchReq>, reply: FastifyReply) {
  const { config, feed } = deps;
  // Watching a queue: like its stats (enqueue, work or admin), whatever the cursor.
  authorizeQueueRead(request, request.params.queue);
  requireSse(request, "a queue's activity");
  const given = givenCursor(request, request.query.after);
  // A cursor from another history: an in-band `reset`, then on from UNKNOWN_CURSOR_RESUME's position.
  return openFeedSse(request, reply, {
    feed,
    config,
    maxPerToken: config.maxSsePerToken,
    provisional: givenPrimer(given),
    decide: () => sseStart(feed, config, given, request.query.from),
    subscribe: (start, sink) => {
      const subscriber = feed.hub.subscribe([queueStream(request.params.queue)], start.after, sink);
      return () => feed.hub.unsubscribe(subscriber);
    },
  });
}
