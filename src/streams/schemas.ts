/** Route schemas: request validation, response serialisation and (later) OpenAPI from one source. */
import { NAME_PATTERN, TYPE_PATTERN } from '../feed/validate.ts';

export const CURSOR_PATTERN = '^\\d{1,16}-\\d{1,16}$';
export const MAX_BATCH = 1000;

export const errorSchema = {
  type: 'object',
  properties: {
    statusCode: { type: 'integer' },
    error: { type: 'string' },
    code: { type: 'string' },
    message: { type: 'string' },
  },
} as const;

export const streamParams = {
  type: 'object',
  required: ['stream'],
  properties: { stream: { type: 'string', pattern: NAME_PATTERN } },
} as const;

export const eventInput = {
  type: 'object',
  required: ['data'],
  additionalProperties: false,
  properties: {
    data: { description: 'any JSON value' },
    type: { type: 'string', pattern: TYPE_PATTERN, description: 'SSE event name' },
    key: { type: 'string', minLength: 1, maxLength: 200, description: 'idempotency key, unique per stream' },
  },
} as const;

export const publishBody = {
  oneOf: [eventInput, { type: 'array', minItems: 1, maxItems: MAX_BATCH, items: eventInput }],
} as const;

const published = {
  type: 'object',
  properties: { id: { type: 'string' }, stream: { type: 'string' }, duplicate: { type: 'boolean' } },
} as const;

export const publishResponse = {
  200: published,
  201: {
    type: 'object',
    properties: {
      ...published.properties,
      events: { type: 'array', items: published },
    },
  },
  400: errorSchema,
  413: errorSchema,
  415: errorSchema,
  503: errorSchema,
} as const;

const readQueryProps = {
  after: { type: 'string', pattern: CURSOR_PATTERN, description: 'resume after this cursor' },
  from: { type: 'string', enum: ['earliest', 'latest'], default: 'latest' },
  limit: { type: 'integer', minimum: 1, maximum: 1000, default: 100 },
  wait: { type: 'number', minimum: 0, maximum: 30, default: 0, description: 'long-poll seconds (JSON only)' },
} as const;

export const streamReadQuery = {
  type: 'object',
  additionalProperties: false,
  properties: readQueryProps,
} as const;

export const MAX_STREAMS_PER_CONNECTION = 100;

export const multiReadQuery = {
  type: 'object',
  additionalProperties: false,
  required: ['stream'],
  properties: {
    ...readQueryProps,
    stream: {
      type: 'array',
      minItems: 1,
      maxItems: MAX_STREAMS_PER_CONNECTION,
      items: { type: 'string', pattern: NAME_PATTERN },
    },
  },
} as const;
