/** Schemas of POST /v1/queues/{queue}/claim: claim with a long-poll, acking the last batch first. */
import { errorSchema } from '../../http/errors.ts';
import { MAX_SECONDS } from '../validate.ts';
import { errors } from '../schemas.ts';
import { ackResults, batchAckBody } from './settle.ts';

export const MAX_CLAIM = 100;
export const MAX_WAIT_SECONDS = 30;
export const DEFAULT_LEASE_SECONDS = 30;

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

export const claimResponse = {
  200: {
    type: 'object',
    properties: {
      jobs: { type: 'array', items: claimedJob },
      paused: {
        type: 'boolean',
        description:
          'present (true) when no jobs came because the queue is paused: a claim with `wait` waits on a paused queue as on an empty one (a resume wakes it and it claims), and says so if the wait runs out while still paused',
      },
      acked: { ...ackResults, description: 'present when the claim carried `ack`: one result per item' },
    },
  },
  ...errors,
  413: errorSchema,
} as const;
