/**
 * Queue administration: counts (any token that may use the queue), and, for admins, the concurrency
 * limit, dead letters and their redrive, pause and resume.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { authorizeQueueRead, canSeeQueue } from '../../auth/policy.ts';
import { ApiError } from '../../errors.ts';
import { listDead, queueStats } from '../admin.ts';
import { jobParams, queueParams } from '../schemas.ts';
import {
  concurrencyBody,
  concurrencyResponse,
  deadQuery,
  deadResponse,
  listResponse,
  pauseResponse,
  retryResponse,
  statsResponse,
} from '../schemas/admin.ts';
import { type JobReq, QUEUE_TAGS, type QueueReq, type QueueRouteDeps, iso, jobRef } from './shared.ts';

type ConcurrencyReq = QueueReq & { Body: { limit: number | null } };
type DeadReq = QueueReq & { Querystring: { limit: number; after?: string } };

const admin = { access: 'admin' } as const;

/** Counts (any token that may use the queue), and the concurrency limit. */
export function adminRoutes(app: FastifyInstance, deps: QueueRouteDeps): void {
  app.post<ConcurrencyReq>(
    '/v1/queues/:queue/concurrency',
    {
      config: admin,
      schema: {
        tags: QUEUE_TAGS,
        summary: 'Set the most jobs of the queue leased at once (null: no limit)',
        params: queueParams,
        body: concurrencyBody,
        response: concurrencyResponse,
      },
    },
    (request) => setConcurrency(deps, request),
  );
  app.get(
    '/v1/queues',
    { schema: { tags: QUEUE_TAGS, summary: 'Every queue with its counts', response: listResponse } },
    (request) => listQueues(deps, request),
  );
  app.get<QueueReq>(
    '/v1/queues/:queue',
    {
      schema: {
        tags: QUEUE_TAGS,
        summary: 'Counts by state, oldest ready age, paused',
        params: queueParams,
        response: statsResponse,
      },
    },
    (request) => stats(deps, request),
  );
}

/** Dead letters, listed and redriven (one, or all of the queue's). */
export function deadLetterRoutes(app: FastifyInstance, deps: QueueRouteDeps): void {
  app.get<DeadReq>(
    '/v1/queues/:queue/dead',
    {
      config: admin,
      schema: {
        tags: QUEUE_TAGS,
        summary: 'Dead-lettered jobs, oldest first',
        params: queueParams,
        querystring: deadQuery,
        response: deadResponse,
      },
    },
    (request, reply) => deadLetters(deps, request, reply),
  );
  app.post<JobReq>(
    '/v1/queues/:queue/dead/:id/retry',
    {
      config: admin,
      schema: {
        tags: QUEUE_TAGS,
        summary: 'Redrive one dead job',
        params: jobParams,
        response: retryResponse,
      },
    },
    (request) => redriveOne(deps, request),
  );
  app.post<QueueReq>(
    '/v1/queues/:queue/dead/retry',
    {
      config: admin,
      schema: {
        tags: QUEUE_TAGS,
        summary: 'Redrive every dead job of the queue',
        params: queueParams,
        response: retryResponse,
      },
    },
    (request) => redriveAll(deps, request),
  );
}

/** Pause and resume: a paused queue accepts jobs and hands none out. */
export function pauseRoutes(app: FastifyInstance, deps: QueueRouteDeps): void {
  for (const action of ['pause', 'resume'] as const) {
    app.post<QueueReq>(
      `/v1/queues/:queue/${action}`,
      {
        config: admin,
        schema: {
          summary:
            action === 'pause' ? 'Stop handing out jobs (enqueues still accepted)' : 'Hand out jobs again',
          params: queueParams,
          response: pauseResponse,
        },
      },
      (request) => setPaused(deps, request, action === 'pause'),
    );
  }
}

async function setConcurrency(deps: QueueRouteDeps, request: FastifyRequest<ConcurrencyReq>) {
  await deps.queues.setConcurrency(request.params.queue, request.body.limit);
  return { queue: request.params.queue, concurrency: request.body.limit };
}

/** Only the queues this token may enqueue to or work on (all of them for an admin). */
async function listQueues(deps: QueueRouteDeps, request: FastifyRequest) {
  return { queues: (await queueStats(deps.db, null)).filter((q) => canSeeQueue(request, q.name)) };
}

async function stats(deps: QueueRouteDeps, request: FastifyRequest<QueueReq>) {
  authorizeQueueRead(request, request.params.queue);
  const [stats] = await queueStats(deps.db, request.params.queue);
  if (!stats) throw queueNotFound(request.params.queue);
  return stats;
}

async function deadLetters(deps: QueueRouteDeps, request: FastifyRequest<DeadReq>, reply: FastifyReply) {
  const { limit, after } = request.query;
  const jobs = await listDead(deps.db, request.params.queue, after ?? null, limit);
  const next = jobs.length > 0 ? jobs[jobs.length - 1].id : (after ?? null);
  const items = jobs.map(
    (j) =>
      `{"id":"${j.id}","payload":${j.payload},"attempt":${j.attempt},"maxAttempts":${j.maxAttempts},"lastError":${JSON.stringify(j.lastError)},"createdAt":"${iso(j.createdAt)}","deadAt":"${iso(j.deadAt)}"}`,
  );
  reply.type('application/json');
  return `{"jobs":[${items.join(',')}],"next":${JSON.stringify(next)}}`;
}

async function redriveOne(deps: QueueRouteDeps, request: FastifyRequest<JobReq>) {
  const ref = jobRef(request.params, '');
  const ids = await deps.queues.retryDead(ref.queue, ref.id);
  if (ids.length === 0) {
    throw new ApiError(404, 'job_not_found', `no dead job ${ref.id} in queue ${ref.queue}`);
  }
  return { id: ref.id, retried: 1 };
}

async function redriveAll(deps: QueueRouteDeps, request: FastifyRequest<QueueReq>) {
  return { retried: (await deps.queues.retryDead(request.params.queue, null)).length };
}

/** An unknown queue is a 404 rather than a new, empty queue named by the request. */
async function setPaused(deps: QueueRouteDeps, request: FastifyRequest<QueueReq>, paused: boolean) {
  if (!(await deps.queues.setPaused(request.params.queue, paused))) {
    throw queueNotFound(request.params.queue);
  }
  return { queue: request.params.queue, paused };
}

const queueNotFound = (queue: string) =>
  new ApiError(
    404,
    'queue_not_found',
    `no queue ${queue}: nothing was ever enqueued to it and it has no settings (enqueue a job or set its concurrency first)`,
  );
