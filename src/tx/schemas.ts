/**
 * Schemas of `POST /v1/tx`. The body schema checks the envelope only: each op is checked by ops.ts
 * with the shared validation, so an error names the op (`ops[3].publish.stream: ...`).
 */
import { TEXT_FIELD_NAMES } from '../feed/event.ts';
import { errorSchema } from '../http/errors.ts';
import { MAX_OPS } from './ops.ts';

/** `stream, data, type?, key?`: a publish op's fields (its endpoint's body, plus the stream). */
const PUBLISH_FIELDS = ['stream', 'data', ...TEXT_FIELD_NAMES.map((f) => `${f}?`)].join(', ');

export const txBody = {
  type: 'object',
  required: ['ops'],
  additionalProperties: false,
  properties: {
    ops: {
      type: 'array',
      minItems: 1,
      maxItems: MAX_OPS,
      // No constraints here: ops.ts checks each op so that errors name it (`ops[3].publish.stream`).
      items: {
        description:
          `exactly one of "publish": {${PUBLISH_FIELDS}} (the body of POST ` +
          '/v1/streams/{stream}/events, plus "stream") or "enqueue": {queue, payload, delay?, runAt?, ' +
          'priority?, key?, maxAttempts?, backoff?} (one job as for POST /v1/queues/{queue}/jobs, plus "queue") ' +
          'or "mercure": {topic (a string or an array), data?, private?, id?, type?, retry?} (a Mercure update; needs an admin token)',
      },
    },
  },
} as const;

const published = {
  type: 'object',
  properties: { id: { type: 'string' }, stream: { type: 'string' }, duplicate: { type: 'boolean' } },
} as const;

export const txResponse = {
  200: {
    type: 'object',
    properties: {
      results: {
        type: 'array',
        description: "one per op, in order: the op's kind and its result",
        items: {
          type: 'object',
          properties: {
            publish: published,
            mercure: { type: 'object', properties: { id: { type: 'string' } } },
            enqueue: {
              type: 'object',
              properties: {
                id: { type: 'string' },
                queue: { type: 'string' },
                duplicate: { type: 'boolean' },
              },
            },
          },
        },
      },
    },
  },
  400: errorSchema,
  413: errorSchema,
  415: errorSchema,
  503: errorSchema,
} as const;
