/** Schemas of POST /v1/queues/{queue}/jobs: one job or a batch. */
import { errorSchema } from '../../http/errors.ts';
import { MAX_BATCH, batchOf } from '../../http/validation.ts';
import { jobInput } from '../schemas.ts';

export const enqueueBody = batchOf(
  jobInput,
  MAX_BATCH,
  'one job, or an array of jobs enqueued in one transaction',
);

const enqueued = {
  type: 'object',
  properties: { id: { type: 'string' }, duplicate: { type: 'boolean' } },
} as const;

export const enqueueResponse = {
  200: enqueued,
  201: {
    type: 'object',
    properties: { ...enqueued.properties, jobs: { type: 'array', items: enqueued } },
  },
  400: errorSchema,
  413: errorSchema,
  415: errorSchema,
  503: errorSchema,
} as const;
