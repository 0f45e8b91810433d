/** Schemas of GET /v1/queues/{queue}/events: queue activity over SSE. */
import { CURSOR_PATTERN } from '../../feed/cursor.ts';
import { errorSchema } from '../../http/errors.ts';
import { errors } from '../schemas.ts';

export const watchQuery = {
  type: 'object',
  additionalProperties: false,
  properties: {
    after: { type: 'string', pattern: CURSOR_PATTERN, description: 'resume after this cursor' },
    from: { type: 'string', enum: ['earliest', 'latest'], default: 'latest' },
  },
} as const;

export const watchResponse = {
  200: { type: 'string', description: 'text/event-stream: enqueued, retry, dead and resumed events' },
  ...errors,
  406: errorSchema,
} as const;
