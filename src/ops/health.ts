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
  properties: {
    status: { type: 'string', description: '`ready`, or `degraded` when a standby serves no reads' },
    checks: checksSchema,
    standbys: {
      type: 'array',
      description: 'With READ_DATABASE_URL: each standby, its state and replay lag',
      items: {
        type: 'object',
        properties: {
          name: { type: 'string' },
          state: { type: 'string', enum: ['ok', 'lagging', 'down', 'promoted'] },
          lagBytes: { type: 'number' },
          reads: { type: 'number', description: 'feed reads it served since start' },
        },
      },
    },
  },
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
      if (checks.database && checks.listener && checks.tailer) {
        if (!deps.feed.reads.configured) return { status: 'ready', checks };
        // A standby out of service does not make this process unready: its reads go to the primary.
        const standbys = deps.feed.reads.status();
        const standby = standbys.every((s) => s.state === 'ok');
        return { status: standby ? 'ready' : 'degraded', checks: { ...checks, standby }, standbys };
      }
      reply.header('retry-after', '2');
      return reply.code(503).send({ ...errorBody(503, 'not_ready', 'not ready: see checks'), checks });
    },
  );
}
