/** Queue route schemas: request validation and response serialisation from one source. */
import { NAME_PATTERN } from '../feed/names.ts';
import { errorSchema } from '../http/errors.ts';
import { batchOf } from '../http/validation.ts';
import { CURSOR_PATTERN } from '../feed/cursor.ts';
import { MAX_BATCH } from '../streams/schemas.ts';
import { MAX_ATTEMPTS_LIMIT, MAX_SECONDS, PRIORITY_LIMIT } from './validate.ts';

export const JOB_ID_PATTERN = '^[0-9]{1,18}$';
export const MAX_CLAIM = 100;
export const MAX_WAIT_SECONDS = 30;
export const DEFAULT_LEASE_SECONDS = 30;
export const MAX_ERROR_CHARS = 10000;

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

const seconds = (description: string) =>
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

const lease = {
  type: 'string',
  minLength: 1,
  maxLength: 100,
  description: 'the token the claim returned',
} as const;

const result = {
  description:
    'any JSON value, kept with the completed job (GET the job) for JOB_RETENTION; at most MAX_JOB_RESULT_BYTES',
} as const;

export const ackBody = {
  type: 'object',
  required: ['lease'],
  additionalProperties: false,
  properties: { lease, result },
} as const;

export const nackBody = {
  type: 'object',
  required: ['lease'],
  additionalProperties: false,
  properties: {
    lease,
    error: { type: 'string', maxLength: MAX_ERROR_CHARS, description: 'kept as the last error' },
    delay: seconds('retry after this many seconds instead of the backoff'),
  },
} as const;

export const extendBody = {
  type: 'object',
  required: ['lease', 'seconds'],
  additionalProperties: false,
  properties: {
    lease,
    seconds: {
      type: 'number',
      exclusiveMinimum: 0,
      maximum: MAX_SECONDS,
      description: 'new lease, from now',
    },
  },
} as const;

export const batchAckBody = {
  type: 'array',
  minItems: 1,
  maxItems: MAX_BATCH,
  items: {
    type: 'object',
    required: ['id', 'lease'],
    additionalProperties: false,
    properties: { id: { type: 'string', pattern: JOB_ID_PATTERN }, lease, result },
  },
} as const;

export const claimBody = {
  type: 'object',
  additionalProperties: false,
  properties: {
    max: { type: 'integer', minimum: 1, maximum: MAX_CLAIM, default: 1 },
    lease: {
      type: 'number',
      exclusiveMinimum: 0,
      maximum: MAX_SECONDS,
      default: DEFAULT_LEASE_SECONDS,
      description: 'seconds the claim holds each job',
    },
    wait: {
      type: 'number',
      minimum: 0,
      maximum: MAX_WAIT_SECONDS,
      default: 0,
      description: 'long-poll seconds when nothing is claimable',
    },
    ack: {
      ...batchAckBody,
      minItems: 0,
      description:
        'jobs to ack before claiming (as POST /v1/queues/{queue}/ack; one result each in "acked"): a worker acks its last batch and claims the next in one round trip',
    },
  },
} as const;

export const deadQuery = {
  type: 'object',
  additionalProperties: false,
  properties: {
    limit: { type: 'integer', minimum: 1, maximum: 1000, default: 100 },
    after: { type: 'string', pattern: JOB_ID_PATTERN, description: 'list dead jobs after this id' },
  },
} as const;

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

export const watchQuery = {
  type: 'object',
  additionalProperties: false,
  properties: {
    after: { type: 'string', pattern: CURSOR_PATTERN, description: 'resume after this cursor' },
    from: { type: 'string', enum: ['earliest', 'latest'], default: 'latest' },
  },
} as const;

/** Responses for the OpenAPI spec: each route's success plus the errors it can give. */
const errors = { 400: errorSchema, 404: errorSchema, 409: errorSchema, 503: errorSchema } as const;
const claimedJob = {
  type: 'object',
  properties: {
    id: { type: 'string' },
    payload: { description: 'as enqueued' },
    attempt: { type: 'integer' },
    maxAttempts: { type: 'integer' },
    lease: { type: 'string' },
    leaseExpiresAt: { type: 'string', format: 'date-time' },
  },
} as const;
const ackResults = {
  type: 'array',
  items: {
    type: 'object',
    properties: {
      id: { type: 'string' },
      ok: { type: 'boolean' },
      status: { type: 'integer' },
      code: { type: 'string' },
      message: { type: 'string' },
    },
  },
} as const;
export const claimResponse = {
  200: {
    type: 'object',
    properties: {
      jobs: { type: 'array', items: claimedJob },
      acked: { ...ackResults, description: 'present when the claim carried `ack`: one result per item' },
    },
  },
  ...errors,
  413: errorSchema,
} as const;
export const ackResponse = {
  204: { type: 'null', description: 'acked' },
  ...errors,
  413: errorSchema,
} as const;
export const nackResponse = {
  200: {
    type: 'object',
    properties: {
      id: { type: 'string' },
      state: { type: 'string', enum: ['ready', 'dead'] },
      attempt: { type: 'integer' },
      runAt: { type: 'string', format: 'date-time' },
    },
  },
  ...errors,
} as const;
export const extendResponse = {
  200: { type: 'object', properties: { id: { type: 'string' }, leaseExpiresAt: { type: 'string' } } },
  ...errors,
} as const;
export const batchAckResponse = {
  200: { type: 'object', properties: { results: ackResults } },
  ...errors,
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
export const watchResponse = {
  200: { type: 'string', description: 'text/event-stream: enqueued, retry, dead and resumed events' },
  ...errors,
} as const;

const time = { type: ['string', 'null'], format: 'date-time' } as const;
export const jobResponse = {
  200: {
    type: 'object',
    properties: {
      id: { type: 'string' },
      queue: { type: 'string' },
      state: { type: 'string', enum: ['ready', 'delayed', 'leased', 'dead', 'completed', 'cancelled'] },
      payload: { description: 'as enqueued' },
      result: { description: 'as stored with the ack (null when none)' },
      group: { type: ['string', 'null'] },
      key: { type: ['string', 'null'] },
      priority: { type: 'integer' },
      attempt: { type: 'integer' },
      maxAttempts: { type: 'integer' },
      lastError: { type: ['string', 'null'] },
      createdAt: time,
      runAt: time,
      leaseExpiresAt: time,
      deadAt: time,
      finishedAt: time,
    },
  },
  ...errors,
} as const;
export const cancelResponse = {
  200: {
    type: 'object',
    properties: { id: { type: 'string' }, state: { type: 'string', enum: ['cancelled'] } },
  },
  ...errors,
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
