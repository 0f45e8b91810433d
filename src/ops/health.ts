/** Liveness and readiness probes. */
import { sql } from 'kysely';
import type { FastifyInstance } from 'fastify';
import type { Kysely } from 'kysely';
import type { Database } from '../db/database.ts';
import { errorBody } from '../http/errors.ts';
import type { Feed } from '../feed/feed.ts';
import { errorSchema } from '../http/errors.ts';

const statusSchema = { type: 'object', properties: { status: { type: 'string' } } } as const;
const checksSchema = {
  type: 'object',
  additionalProperties: { type: 'boolean' },
  description: 'each check, true when it passes',
} as const;
const readySchema = {
  type: 'object',
  properties: { status: { type: 'string' }, checks: checksSchema },
} as const;
const notReadySchema = {
  type: 'object',
  properties: { ...errorSchema.properties, checks: checksSchema },
} as const;

export function healthRoutes(app: FastifyInstance, deps: { db: Kysely<Database>; feed: Feed }): void {
  app.get(
    '/healthz',
    { schema: { summary: 'The process is up', tags: ['ops'], response: { 200: statusSchema } } },
    async () => ({ status: 'ok' }),
  );

  app.get(
    '/readyz',
    {
      schema: {
        summary: 'Database reachable, migrations done, listener connected',
        tags: ['ops'],
        response: { 200: readySchema, 503: notReadySchema },
      },
    },
    async (_req, reply) => {
      const checks = {
        database: false,
        listener: deps.feed.listener.connected,
        tailer: deps.feed.tailer.ready,
      };
      try {
        await sql`select 1 from commitfeed.feed limit 0`.execute(deps.db);
        checks.database = true;
      } catch {
        // reported below
      }
      if (checks.database && checks.listener && checks.tailer) return { status: 'ready', checks };
      reply.header('retry-after', '2');
      return reply.code(503).send({ ...errorBody(503, 'not_ready', 'not ready: see checks'), checks });
    },
  );
}
