/** Liveness and readiness probes. */
import { sql } from 'kysely';
import type { FastifyInstance } from 'fastify';
import type { Kysely } from 'kysely';
import type { Database } from '../db/database.ts';
import { errorBody } from '../errors.ts';
import type { Feed } from '../feed/feed.ts';

export function healthRoutes(app: FastifyInstance, deps: { db: Kysely<Database>; feed: Feed }): void {
  app.get('/healthz', { schema: { summary: 'The process is up' } }, async () => ({ status: 'ok' }));

  app.get(
    '/readyz',
    { schema: { summary: 'Database reachable, migrations done, listener connected' } },
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
