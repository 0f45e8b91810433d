/**
 * Webhook route schemas: request validation and response serialisation (and the OpenAPI reference)
 * from one source. No response schema has a `secret`: it is serialised only by the create and
 * rotate responses, which add it on purpose.
 */
import { CURSOR_PATTERN } from '../feed/cursor.ts';
import { TYPE_PATTERN } from '../feed/validate.ts';
import { errorSchema } from '../http/errors.ts';
import { cursorNotInFeedSchema } from '../http/read-position.ts';
import { GLOB_PATTERN } from '../streams/glob.ts';

/** Endpoint names: a stream-name's characters, short enough for `webhook:<name>` to be a queue name. */
export const ENDPOINT_NAME_PATTERN = '^[A-Za-z0-9._:-]{1,190}$';

export const ADMIN = { access: 'admin' } as const;
export type NameReq = { Params: { name: string } };

export const nameParams = {
  type: 'object',
  required: ['name'],
  properties: { name: { type: 'string', pattern: ENDPOINT_NAME_PATTERN } },
} as const;

const settings = {
  url: {
    type: 'string',
    minLength: 1,
    maxLength: 2000,
    description: 'http:// or https:// URL deliveries are POSTed to',
  },
  description: { type: ['string', 'null'], maxLength: 1000 },
  headers: {
    type: 'object',
    maxProperties: 20,
    additionalProperties: { type: 'string', maxLength: 4000 },
    description: 'extra request headers (not content-type, content-length, host, user-agent, webhook-*)',
  },
  concurrency: {
    type: 'integer',
    minimum: 1,
    maximum: 1000,
    description: 'concurrent mode: most deliveries in flight at once (ordered mode: 1)',
  },
  timeoutSeconds: { type: 'number', minimum: 0.1, maximum: 300, description: 'per-attempt timeout' },
  rateLimit: {
    type: ['number', 'null'],
    exclusiveMinimum: 0,
    maximum: 100000,
    description: 'most deliveries started per second by each process (null: no limit)',
  },
  enabled: { type: 'boolean', description: 'a disabled endpoint keeps its deliveries, sent once enabled' },
} as const;

export const createBody = {
  type: 'object',
  required: ['name', 'url', 'streams'],
  additionalProperties: false,
  properties: {
    name: { type: 'string', pattern: ENDPOINT_NAME_PATTERN },
    ...settings,
    streams: {
      type: 'array',
      minItems: 1,
      maxItems: 100,
      items: { type: 'string', pattern: GLOB_PATTERN },
      description: 'stream names and globs (`orders.*`) whose events are delivered',
    },
    types: {
      type: ['array', 'null'],
      minItems: 1,
      maxItems: 100,
      items: { type: 'string', pattern: TYPE_PATTERN },
      description: 'only events of these types (default: every event)',
    },
    mode: {
      type: 'string',
      enum: ['ordered', 'concurrent'],
      default: 'concurrent',
      description:
        'ordered: one at a time, in commit order (a retry holds back later events); concurrent: up to concurrency at once',
    },
    from: {
      type: 'string',
      anyOf: [{ enum: ['earliest', 'latest'] }, { pattern: CURSOR_PATTERN }],
      default: 'latest',
      description:
        'latest (events committed from now on), earliest (every retained event), or after a cursor',
    },
  },
} as const;

export const updateBody = {
  type: 'object',
  additionalProperties: false,
  minProperties: 1,
  properties: settings,
} as const;

const backlog = {
  type: 'object',
  properties: {
    pending: { type: 'integer', description: 'deliveries waiting, retrying or in flight' },
    retrying: { type: 'integer', description: 'of those, waiting for a retry' },
    failed: { type: 'integer', description: 'deliveries that used every attempt (resend them)' },
    lagSeconds: { type: 'number', description: 'age of the oldest pending event (0 when none)' },
  },
} as const;

const endpointProperties = {
  name: { type: 'string' },
  url: { type: 'string' },
  streams: { type: 'array', items: { type: 'string' } },
  types: { type: ['array', 'null'], items: { type: 'string' } },
  description: { type: ['string', 'null'] },
  headers: { type: 'object', additionalProperties: { type: 'string' } },
  mode: { type: 'string' },
  concurrency: { type: 'integer' },
  timeoutSeconds: { type: 'number' },
  rateLimit: { type: ['number', 'null'] },
  enabled: { type: 'boolean' },
  disabledReason: {
    type: ['string', 'null'],
    description: 'why it was disabled (410 Gone, failing since ...)',
  },
  disabledAt: { type: ['string', 'null'] },
  failingSince: { type: ['string', 'null'], description: 'every attempt since this time failed' },
  lastSuccessAt: { type: ['string', 'null'] },
  delivered: { type: 'integer', description: 'attempts answered 2xx' },
  failedAttempts: { type: 'integer' },
  backlog,
  createdAt: { type: 'string' },
  updatedAt: { type: 'string' },
} as const;

const endpoint = { type: 'object', properties: endpointProperties } as const;
const withSecret = {
  type: 'object',
  properties: {
    ...endpointProperties,
    secret: { type: 'string', description: 'whsec_...: shown once; verify signatures with it' },
  },
} as const;

const errors = { 400: errorSchema, 404: errorSchema, 409: errorSchema, 503: errorSchema } as const;
/** The errors of a route that takes a cursor or an event id: 409 cursor_not_in_feed names where to
 * go on (src/http/read-position.ts). */
const cursorErrors = { ...errors, 409: cursorNotInFeedSchema } as const;

export const createdResponse = { 201: withSecret, ...cursorErrors } as const;
export const endpointResponse = { 200: endpoint, ...errors } as const;
export const listResponse = {
  200: { type: 'object', properties: { webhooks: { type: 'array', items: endpoint } } },
  ...errors,
} as const;
export const deletedResponse = { 204: { type: 'null', description: 'deleted' }, ...errors } as const;

export const rotateBody = {
  type: ['object', 'null'],
  additionalProperties: false,
  properties: {
    overlapSeconds: {
      type: 'number',
      minimum: 0,
      maximum: 2_000_000,
      description: 'how long the old secret keeps signing too (default WEBHOOK_SECRET_OVERLAP)',
    },
  },
} as const;
export const rotateResponse = {
  200: {
    type: 'object',
    properties: {
      secret: { type: 'string' },
      previousValidUntil: { type: 'string', description: 'deliveries are signed by both secrets until then' },
    },
  },
  ...errors,
} as const;

export const attemptsQuery = {
  type: 'object',
  additionalProperties: false,
  properties: {
    event: {
      type: 'string',
      pattern: CURSOR_PATTERN,
      description: "one event's attempts: its id (webhook-id), with or without the feed's tag",
    },
    limit: { type: 'integer', minimum: 1, maximum: 1000, default: 100 },
    before: { type: 'string', pattern: '^\\d{1,18}$', description: 'attempts older than this one (paging)' },
  },
} as const;

const attempt = {
  type: 'object',
  properties: {
    id: { type: 'string' },
    eventId: { type: 'string', description: 'the webhook-id' },
    attempt: { type: 'integer' },
    at: { type: 'string' },
    ok: { type: 'boolean' },
    status: { type: ['integer', 'null'] },
    latencyMs: { type: 'number' },
    error: { type: ['string', 'null'], description: 'why no response came (timeout, refused address, ...)' },
    response: { type: ['string', 'null'], description: 'the first KiB of the response body' },
  },
} as const;
export const attemptsResponse = {
  200: { type: 'object', properties: { attempts: { type: 'array', items: attempt } } },
  ...cursorErrors,
} as const;

export const resendBody = {
  type: 'object',
  additionalProperties: false,
  minProperties: 1,
  maxProperties: 1,
  properties: {
    event: { type: 'string', pattern: CURSOR_PATTERN, description: 'resend this event (its webhook-id)' },
    failedSince: { type: 'string', format: 'date-time', description: 'resend every delivery failed since' },
  },
} as const;
export const resendResponse = {
  200: { type: 'object', properties: { resent: { type: 'integer' } } },
  ...cursorErrors,
} as const;

export const replayBody = {
  type: 'object',
  required: ['from'],
  additionalProperties: false,
  properties: {
    from: {
      type: 'string',
      anyOf: [{ enum: ['earliest'] }, { pattern: CURSOR_PATTERN }],
      description: 'deliver again every matching event after this cursor, or every retained one',
    },
  },
} as const;
export const replayResponse = {
  200: {
    type: 'object',
    properties: {
      from: { type: 'string' },
      lost: {
        type: 'boolean',
        description: 'retention already dropped events after `from`: they cannot be delivered',
      },
      trimMark: { type: 'string', description: 'every event at or before this cursor was dropped' },
    },
  },
  ...cursorErrors,
} as const;
