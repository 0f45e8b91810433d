/**
 * Stream subscriptions' routes (`/v1/subscriptions`): a queue subscribed to a stream, every event one
 * job. Administration (admin tokens when access control is on). No SQL here: stream-subscriptions.ts
 * has it.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../config/config.ts';
import type { Db } from '../db/database.ts';
import { namedResourceRoutes } from './named-routes.ts';
import { ApiError } from '../errors.ts';
import { tagCursorText } from '../feed/cursor.ts';
import type { Feed } from '../feed/feed.ts';
import { cursorInFeed } from '../http/read-position.ts';
import { toJobInput } from '../queues/validate.ts';
import type { Follower } from './follower.ts';
import {
  ADMIN,
  type JobOptions,
  streamSubscriptionBody,
  streamSubscriptionListResponse,
  streamSubscriptionResponse,
} from './schemas.ts';
import {
  createStreamSubscription,
  deleteStreamSubscription,
  listStreamSubscriptions,
  type StreamSubscriptionStatus,
  setStreamSubscriptionPaused,
} from './stream-subscriptions.ts';

export interface StreamSubscriptionRouteDeps {
  db: Db;
  config: Config;
  follower: Follower;
  feed: Feed;
}

type CreateReq = {
  Body: { name: string; stream: string; type?: string; queue: string; from: string; job?: JobOptions };
};

/** The routes' OpenAPI tag: the name is the path's, the description says which subscriptions these are. */
export const STREAM_SUBSCRIPTION_TAG = {
  name: 'subscriptions',
  description: 'stream subscriptions: every event of a stream becomes one job of a queue',
};
const tags = [STREAM_SUBSCRIPTION_TAG.name];

export function streamSubscriptionRoutes(app: FastifyInstance, deps: StreamSubscriptionRouteDeps): void {
  app.post<CreateReq>(
    '/v1/subscriptions',
    {
      config: ADMIN,
      schema: {
        tags,
        summary: 'Create a stream subscription: every event of a stream becomes one job of a queue',
        body: streamSubscriptionBody,
        response: streamSubscriptionResponse,
      },
    },
    (request, reply) => createOne(deps, request, reply),
  );
  namedResourceRoutes(app, {
    path: '/v1/subscriptions',
    tags,
    listKey: 'subscriptions',
    listResponse: streamSubscriptionListResponse,
    response: streamSubscriptionResponse,
    summaries: {
      list: 'Every stream subscription',
      show: 'One stream subscription: cursor, jobs made, events lost to retention',
      delete: 'Delete a stream subscription (its jobs stay queued)',
      pause: 'Pause a stream subscription: no more jobs (its cursor waits; retention may overtake it)',
      resume: 'Resume a stream subscription: events become jobs again, from its cursor',
    },
    list: (name) => listStreamSubscriptions(deps.db, name),
    remove: (name) => deleteStreamSubscription(deps.db, name),
    setPaused: (name, paused) => setStreamSubscriptionPaused(deps.db, name, paused),
    notFound,
    show: (s) => (s === null ? s : tagged(deps, s)),
    resumed: () => deps.follower.wake(),
  });
}

const notFound = (name: string) =>
  new ApiError(404, 'subscription_not_found', `no subscription named ${name}`);

async function createOne(
  deps: StreamSubscriptionRouteDeps,
  request: FastifyRequest<CreateReq>,
  reply: FastifyReply,
): Promise<FastifyReply> {
  const { db, config, follower } = deps;
  const b = request.body;
  // A cursor from another history would follow nothing, silently: 409 naming where to start instead.
  const from =
    b.from === 'earliest' || b.from === 'latest'
      ? b.from
      : await cursorInFeed(deps.feed, config, b.from, 'from');
  // The same rules as an enqueue's job options (defaults included).
  const job = toJobInput(b.queue, { payload: null, ...b.job }, config.maxEventBytes, 'body/job');
  const sub = await createStreamSubscription(db, {
    name: b.name,
    stream: b.stream,
    type: b.type ?? null,
    queue: b.queue,
    priority: job.priority,
    maxAttempts: job.maxAttempts,
    backoff: job.backoff,
    from,
  });
  follower.wake();
  return reply.code(201).send(tagged(deps, sub));
}

/** A stream subscription's status with its cursor in the form every answer has (the feed's tag). */
function tagged(deps: StreamSubscriptionRouteDeps, s: StreamSubscriptionStatus): StreamSubscriptionStatus {
  return { ...s, cursor: tagCursorText(s.cursor, deps.feed.history.tag) };
}
