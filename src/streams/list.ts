/** GET /v1/streams: stream names with their recent activity (for the live page and operators). */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Kysely } from 'kysely';
import { canSubscribe } from '../auth/policy.ts';
import type { Database } from '../db/database.ts';
import { listStreams } from './queries.ts';
import { streamListQuery, streamListResponse } from './schemas.ts';

/** Counts are taken from this many most recent feed events (a bounded read, not a scan). */
export const STATS_WINDOW = 10_000;

type ListReq = { Querystring: { limit: number } };

export function streamListRoutes(app: FastifyInstance, deps: { db: Kysely<Database> }): void {
  app.get<ListReq>(
    '/v1/streams',
    {
      schema: {
        summary: 'List streams with their recent activity',
        description:
          `Names in alphabetical order; \`recent\` and \`lastMinute\` count events among the feed's ${STATS_WINDOW} ` +
          'most recent events (bounded cost), so they are activity indicators, not totals.',
        tags: ['streams'],
        querystring: streamListQuery,
        response: streamListResponse,
      },
    },
    (request) => listRecent(deps.db, request),
  );
}

async function listRecent(db: Kysely<Database>, request: FastifyRequest<ListReq>) {
  const { streams, more } = await listStreams(db, { limit: request.query.limit, window: STATS_WINDOW });
  // Only the streams this token may read (every stream when access control is off).
  return { streams: streams.filter((s) => canSubscribe(request, s.name)), window: STATS_WINDOW, more };
}
