/**
 * Stream subscription and schedule route schemas: request validation and response serialisation from
 * one source.
 */
import { TYPE_PATTERN } from '../feed/validate.ts';
import { NAME_PATTERN } from '../feed/names.ts';
import { errorSchema } from '../http/errors.ts';
import { cursorNotInFeedSchema } from '../http/read-position.ts';
import { jobInput } from '../queues/schemas.ts';
import type { Backoff } from '../queues/validate.ts';
import { CURSOR_PATTERN } from '../feed/cursor.ts';
import { CATCH_UP } from './schedules.ts';

export const MAX_CATCH_UP = 10_000;

/** Every flow route is administration (admin tokens when access control is on). */
export const ADMIN = { access: 'admin' } as const;

export type NameReq = { Params: { name: string } };
/** A body's `job`, as jobOptions below lets it through. */
export type JobOptions = { priority?: number; maxAttempts?: number; backoff?: Backoff };

export const nameParams = {
  type: 'object',
  required: ['name'],
  properties: { name: { type: 'string', pattern: NAME_PATTERN } },
} as const;

/** The options of the jobs a stream subscription or schedule makes (an enqueue's, minus timing and key). */
const jobOptions = {
  type: 'object',
  additionalProperties: false,
  properties: {
    priority: jobInput.properties.priority,
    maxAttempts: jobInput.properties.maxAttempts,
    backoff: jobInput.properties.backoff,
  },
} as const;

export const streamSubscriptionBody = {
  type: 'object',
  required: ['name', 'stream', 'queue'],
  additionalProperties: false,
  properties: {
    name: { type: 'string', pattern: NAME_PATTERN },
    stream: { type: 'string', pattern: NAME_PATTERN, description: 'the stream whose events become jobs' },
    type: { type: 'string', pattern: TYPE_PATTERN, description: 'only events of this type (default: all)' },
    queue: { type: 'string', pattern: NAME_PATTERN },
    from: {
      type: 'string',
      anyOf: [{ enum: ['earliest', 'latest'] }, { pattern: CURSOR_PATTERN }],
      default: 'latest',
      description:
        'latest (events committed from now on), earliest (every retained event), or after a cursor',
    },
    job: jobOptions,
  },
} as const;

const loss = {
  type: ['object', 'null'],
  properties: { at: { type: 'string' }, events: { type: 'integer' }, partition: { type: 'string' } },
} as const;

const streamSubscription = {
  type: 'object',
  properties: {
    name: { type: 'string' },
    stream: { type: 'string' },
    type: { type: ['string', 'null'] },
    queue: { type: 'string' },
    priority: { type: 'integer' },
    maxAttempts: { type: 'integer' },
    paused: { type: 'boolean' },
    cursor: { type: 'string', description: 'the last event handled' },
    jobs: { type: 'integer', description: 'jobs made so far' },
    followedAt: { type: ['string', 'null'] },
    lostEvents: {
      type: 'integer',
      description:
        'events retention dropped before they became jobs (0 unless the stream subscription fell that far behind)',
    },
    lastLoss: loss,
    createdAt: { type: 'string' },
  },
} as const;

const errors = { 400: errorSchema, 404: errorSchema, 409: errorSchema, 503: errorSchema } as const;

export const streamSubscriptionResponse = {
  200: streamSubscription,
  201: streamSubscription,
  ...errors,
  // subscription_exists, or cursor_not_in_feed: `from` is a cursor of another history (with resumeFrom).
  409: cursorNotInFeedSchema,
} as const;
export const streamSubscriptionListResponse = {
  200: { type: 'object', properties: { subscriptions: { type: 'array', items: streamSubscription } } },
  ...errors,
} as const;
export const deletedResponse = { 204: { type: 'null', description: 'deleted' }, ...errors } as const;

export const scheduleBody = {
  type: 'object',
  required: ['cron', 'queue'],
  additionalProperties: false,
  properties: {
    cron: {
      type: 'string',
      minLength: 1,
      maxLength: 200,
      description:
        '5 fields (minute hour day-of-month month day-of-week), 6 with seconds first, or @daily, ...',
    },
    timezone: { type: 'string', minLength: 1, maxLength: 100, default: 'UTC', description: 'IANA time zone' },
    queue: { type: 'string', pattern: NAME_PATTERN },
    payload: { description: "any JSON value, the job's `data` (default null)" },
    catchUp: {
      type: 'string',
      enum: [...CATCH_UP],
      default: 'last',
      description: 'ticks missed while nothing ran: none, the last one, or all (the newest catchUpMax)',
    },
    catchUpMax: { type: 'integer', minimum: 1, maximum: MAX_CATCH_UP, default: 100 },
    job: jobOptions,
  },
} as const;

const schedule = {
  type: 'object',
  properties: {
    name: { type: 'string' },
    cron: { type: 'string' },
    timezone: { type: 'string' },
    queue: { type: 'string' },
    payload: {},
    priority: { type: 'integer' },
    maxAttempts: { type: 'integer' },
    catchUp: { type: 'string' },
    catchUpMax: { type: 'integer' },
    paused: { type: 'boolean' },
    lastTick: { type: ['string', 'null'], description: 'the newest tick handled (enqueued or skipped)' },
    nextTick: { type: ['string', 'null'] },
    ticks: { type: 'integer', description: 'jobs enqueued so far' },
    createdAt: { type: 'string' },
  },
} as const;

export const scheduleResponse = { 200: schedule, 201: schedule, ...errors } as const;
export const scheduleListResponse = {
  200: { type: 'object', properties: { schedules: { type: 'array', items: schedule } } },
  ...errors,
} as const;
