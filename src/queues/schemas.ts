/**
 * What the queue route schemas (schemas/, one file a route group) share: the path parameters, the job
 * as enqueued (also part of POST /v1/tx and the flows' bodies) and the error responses. Request
 * validation and response serialisation come from these one source.
 */
import { NAME_PATTERN } from '../feed/names.ts';
import { errorSchema } from '../http/errors.ts';
import { MAX_ATTEMPTS_LIMIT, MAX_SECONDS, PRIORITY_LIMIT } from './validate.ts';

export const JOB_ID_PATTERN = '^[0-9]{1,18}$';

export const queueParams = {
  type: 'object',
  required: ['queue'],
  properties: { queue: { type: 'string', pattern: NAME_PATTERN } },
} as const;

// The id is checked by the handler (400 invalid_id): a failed params schema reads as a bad name.
export const jobParams = {
  type: 'object',
  required: ['queue', 'id'],
  properties: { queue: { type: 'string', pattern: NAME_PATTERN }, id: { type: 'string' } },
} as const;

export const seconds = (description: string) =>
  ({ type: 'number', minimum: 0, maximum: MAX_SECONDS, description }) as const;

export const jobInput = {
  type: 'object',
  required: ['payload'],
  additionalProperties: false,
  properties: {
    payload: { description: 'any JSON value, handed to the worker as is' },
    delay: seconds('seconds before the job may run'),
    runAt: { type: 'string', minLength: 1, maxLength: 64, description: 'ISO 8601 time the job may run from' },
    priority: {
      type: 'integer',
      minimum: -PRIORITY_LIMIT,
      maximum: PRIORITY_LIMIT,
      description: 'lower runs first (default 0)',
    },
    key: { type: 'string', minLength: 1, maxLength: 200, description: 'dedup key among jobs not completed' },
    group: {
      type: 'string',
      minLength: 1,
      maxLength: 200,
      description: "ordered group: the group's jobs are handed out one at a time, in enqueue order",
    },
    maxAttempts: { type: 'integer', minimum: 1, maximum: MAX_ATTEMPTS_LIMIT, description: 'default 5' },
    backoff: {
      type: 'object',
      additionalProperties: false,
      properties: {
        type: { type: 'string', enum: ['exponential', 'fixed'] },
        delay: seconds('first (fixed: every) retry delay, default 1'),
        max: seconds('longest retry delay, default 3600'),
        jitter: { type: 'boolean', description: 'randomise each delay to 50-100% (default true)' },
      },
    },
  },
} as const;

/** Responses for the OpenAPI spec: each route's success plus the errors it can give. */
export const errors = { 400: errorSchema, 404: errorSchema, 409: errorSchema, 503: errorSchema } as const;
