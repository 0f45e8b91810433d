/** Schemas of the queue administration routes: counts, concurrency, dead letters and redrive, pause. */
import { errorSchema } from '../../http/errors.ts';
import { JOB_ID_PATTERN, errors } from '../schemas.ts';

const statsSchema = {
  type: 'object',
  properties: {
    name: { type: 'string' },
    paused: { type: 'boolean' },
    concurrency: { type: ['integer', 'null'], description: 'most jobs leased at once (null: no limit)' },
    ready: { type: 'integer' },
    delayed: { type: 'integer' },
    leased: { type: 'integer' },
    dead: { type: 'integer' },
    completed: { type: 'integer' },
    oldestReadyAgeSeconds: { type: 'number' },
  },
} as const;

export const statsResponse = {
  200: statsSchema,
  400: errorSchema,
  404: errorSchema,
  503: errorSchema,
} as const;
export const listResponse = {
  200: { type: 'object', properties: { queues: { type: 'array', items: statsSchema } } },
  503: errorSchema,
} as const;

export const concurrencyBody = {
  type: 'object',
  required: ['limit'],
  additionalProperties: false,
  properties: {
    limit: {
      type: ['integer', 'null'],
      minimum: 1,
      maximum: 1000000,
      description: 'most jobs of the queue leased at once; null removes the limit',
    },
  },
} as const;
export const concurrencyResponse = {
  200: {
    type: 'object',
    properties: { queue: { type: 'string' }, concurrency: { type: ['integer', 'null'] } },
  },
  ...errors,
} as const;

export const deadQuery = {
  type: 'object',
  additionalProperties: false,
  properties: {
    limit: { type: 'integer', minimum: 1, maximum: 1000, default: 100 },
    after: { type: 'string', pattern: JOB_ID_PATTERN, description: 'list dead jobs after this id' },
  },
} as const;
export const deadResponse = {
  200: {
    type: 'object',
    properties: {
      jobs: {
        type: 'array',
        items: {
          type: 'object',
          properties: {
            id: { type: 'string' },
            payload: {},
            attempt: { type: 'integer' },
            maxAttempts: { type: 'integer' },
            lastError: { type: ['string', 'null'] },
            createdAt: { type: 'string' },
            deadAt: { type: 'string' },
          },
        },
      },
      next: { type: ['string', 'null'] },
    },
  },
  ...errors,
} as const;
export const retryResponse = {
  200: { type: 'object', properties: { id: { type: 'string' }, retried: { type: 'integer' } } },
  ...errors,
} as const;

export const pauseResponse = {
  200: { type: 'object', properties: { queue: { type: 'string' }, paused: { type: 'boolean' } } },
  ...errors,
} as const;
