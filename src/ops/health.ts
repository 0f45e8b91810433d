/** Liveness and readiness probes. */
import { sql } from 'kysely';
import type { FastifyInstance } from 'fastify';
import type { Kysely } from 'kysely';
import type { Database } from '../db/database.ts';
import { errorBody } from '../http/errors.ts';
import type { Feed } from '../feed/feed.ts';
import { errorSchema } from '../http/errors.ts';
import type { SelfCheck } from './self-check.ts';

const statusSchema = { type: 'object', properties: { status: { type: 'string' } } } as const;
const checksSchema = {
  type: 'object',
  additionalProperties: { type: 'boolean' },
  description: 'each check, true when it passes',
} as const;
const selfCheckSchema = {
  type: 'object',
  description:
    'With SELF_CHECK_INTERVAL: the last end-to-end check of delivery (see docs/operations.md#self-check)',
  properties: {
    state: { type: 'string', enum: ['ok', 'degraded', 'failing'] },
    stalled: {
      type: 'array',
      items: { type: 'string', enum: ['commit', 'wake', 'tail_read', 'hub', 'horizon'] },
      description: 'the stages the last check missed',
    },
    consecutiveMisses: {
      type: 'number',
      description: 'consecutive checks whose marker was not read or not fanned out in time',
    },
    lastOkAt: { type: ['string', 'null'], description: 'when a check last passed every stage' },
  },
} as const;
const readySchema = {
  type: 'object',
  properties: {
    status: {
      type: 'string',
      description: '`ready`, or `degraded` when a standby serves no reads or the self-check missed a stage',
    },
    checks: checksSchema,
    selfCheck: selfCheckSchema,
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
  properties: { ...errorSchema.properties, checks: checksSchema, selfCheck: selfCheckSchema },
} as const;

export function healthRoutes(
  app: FastifyInstance,
  deps: { db: Kysely<Database>; feed: Feed; selfCheck?: SelfCheck },
): void {
  app.get(
    '/healthz',
    { schema: { summary: 'The process is up', tags: ['ops'], response: { 200: statusSchema } } },
    async () => ({ status: 'ok' }),
  );

  app.get(
    '/readyz',
    {
      schema: {
        summary: 'Database reachable, migrations done, listener connected, delivery passing its self-check',
        tags: ['ops'],
        response: { 200: readySchema, 503: notReadySchema },
      },
    },
    async (_req, reply) => {
      const checks: Record<string, boolean> = {
        database: await databaseUp(deps.db),
        listener: deps.feed.listener.connected,
        tailer: deps.feed.tailer.ready,
      };
      const selfCheck = deps.selfCheck?.status();
      if (selfCheck) checks.delivery = selfCheck.state !== 'failing';
      const shown = selfCheck ? { selfCheck } : {};
      if (!Object.values(checks).every(Boolean)) {
        reply.header('retry-after', '2');
        return reply
          .code(503)
          .send({ ...errorBody(503, 'not_ready', 'not ready: see checks'), checks, ...shown });
      }
      const delivering = selfCheck === undefined || selfCheck.state === 'ok';
      if (!deps.feed.reads.configured) return { status: delivering ? 'ready' : 'degraded', checks, ...shown };
      // A standby out of service does not make this process unready: its reads go to the primary.
      const standbys = deps.feed.reads.status();
      checks.standby = standbys.every((s) => s.state === 'ok');
      return { status: delivering && checks.standby ? 'ready' : 'degraded', checks, standbys, ...shown };
    },
  );
}

async function databaseUp(db: Kysely<Database>): Promise<boolean> {
  try {
    await sql`select 1 from commitfeed.feed limit 0`.execute(db);
    return true;
  } catch {
    return false;
  }
}
