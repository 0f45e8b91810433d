/** Route schemas: request validation, response serialisation and (later) OpenAPI from one source. */
import { EVENT_BODY_SCHEMA, EVENT_JSON_SCHEMA } from '../feed/event.ts';
import { NAME_PATTERN } from '../feed/names.ts';
import { CURSOR_PATTERN } from '../feed/cursor.ts';
import { errorSchema } from '../http/errors.ts';
import { cursorNotInFeedSchema } from '../http/read-position.ts';
import { GLOB_PATTERN } from './glob.ts';
import { MAX_BATCH, batchOf } from '../http/validation.ts';

export const streamParams = {
  type: 'object',
  required: ['stream'],
  properties: { stream: { type: 'string', pattern: NAME_PATTERN } },
} as const;

export const publishBody = batchOf(
  EVENT_BODY_SCHEMA,
  MAX_BATCH,
  'one event, or an array of events published in one transaction',
);

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
      // A name, or a glob (`orders.*`: SSE only; see src/streams/glob.ts).
      items: { type: 'string', pattern: GLOB_PATTERN },
    },
  },
} as const;

/** GET reads answer SSE or JSON by `Accept`; the handler writes both itself (these document them). */
export const readResponse = {
  200: {
    description:
      'JSON page (default) or, with `Accept: text/event-stream`, an SSE stream: `retry:` and a priming frame (`id:` of the start position, `event: primed`, empty data) first, ' +
      'then `id`/`event`/`data` frames; `event: unavailable` (no id) when the database is lost mid-stream',
    content: {
      'application/json': {
        schema: {
          type: 'object',
          properties: {
            events: { type: 'array', items: EVENT_JSON_SCHEMA },
            next: { type: 'string', description: 'cursor to pass as `after` for the next page' },
          },
        },
      },
      'text/event-stream': { schema: { type: 'string' } },
    },
  },
  304: {
    description:
      'Not Modified: If-None-Match named the ETag of this full page, which never changes (docs/streams.md#caching-history-pages)',
    type: 'null',
  },
  400: errorSchema,
  409: {
    ...cursorNotInFeedSchema,
    description:
      'cursor_not_in_feed (JSON reads): the cursor is from another history; `resumeFrom` says where to go on (docs/streams.md#cursors-from-another-history). SSE reads get an in-band `reset` instead',
  },
  503: errorSchema,
} as const;

export const streamListQuery = {
  type: 'object',
  additionalProperties: false,
  properties: {
    limit: { type: 'integer', minimum: 1, maximum: 1000, default: 200, description: 'most streams listed' },
  },
} as const;

export const streamListResponse = {
  200: {
    type: 'object',
    properties: {
      streams: {
        type: 'array',
        items: {
          type: 'object',
          properties: {
            name: { type: 'string' },
            recent: {
              type: 'integer',
              description: 'events among the most recent `window` events of the feed',
            },
            lastMinute: { type: 'integer', description: 'events in the last 60 s (rate = lastMinute / 60)' },
            lastEventAt: { type: ['string', 'null'], format: 'date-time' },
            types: { type: 'array', items: { type: 'string' }, description: 'event types seen recently' },
          },
        },
      },
      window: { type: 'integer', description: 'how many recent feed events the counts are taken from' },
      more: { type: 'boolean', description: 'more streams exist than `limit`' },
    },
  },
  400: errorSchema,
  503: errorSchema,
} as const;
