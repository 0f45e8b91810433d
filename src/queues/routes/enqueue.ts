/** POST /v1/queues/:queue/jobs: one job or a batch, grouped with concurrent enqueues. */
import type { FastifyInstance } from 'fastify';
import { oneOrBatchRoute } from '../../http/one-or-batch.ts';
import { enqueueBody, enqueueResponse } from '../schemas/enqueue.ts';
import { queueParams } from '../schemas.ts';
import { type JobBody, toJobInput } from '../validate.ts';
import { QUEUE_TAGS, type QueueRouteDeps } from './shared.ts';

export function enqueueRoutes(app: FastifyInstance, { queues, config }: QueueRouteDeps): void {
  oneOrBatchRoute(app, {
    url: '/v1/queues/:queue/jobs',
    param: 'queue',
    action: 'enqueue',
    schema: {
      tags: QUEUE_TAGS,
      summary: 'Enqueue one job or a batch',
      params: queueParams,
      body: enqueueBody,
      response: enqueueResponse,
    },
    list: 'jobs',
    check: (queue, job: JobBody, where) => toJobInput(queue, job, config.maxEventBytes, where),
    write: (inputs) => queues.enqueue(inputs),
    show: (r) => ({ id: r.id, duplicate: r.duplicate }),
  });
}
