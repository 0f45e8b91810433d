/** Schemas of settling claimed jobs: ack, nack, extend, and the batch ack (a claim's `ack` too). */
import { errorSchema } from '../../http/errors.ts';
import { MAX_BATCH } from '../../http/validation.ts';
import { MAX_SECONDS } from '../validate.ts';
import { JOB_ID_PATTERN, errors, seconds } from '../schemas.ts';

export const MAX_ERROR_CHARS = 10000;

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

export const ackResults = {
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
