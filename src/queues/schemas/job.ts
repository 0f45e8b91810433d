/** Schemas of one job's routes: its status, and cancelling it. */
import { errors } from '../schemas.ts';

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
