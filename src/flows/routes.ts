/**
 * Routes of the flows into queues: stream subscriptions (`/v1/subscriptions`) and cron schedules
 * (`/v1/schedules`). Both are administration (admin tokens when access control is on). No SQL here.
 */
import type { FastifyInstance } from 'fastify';
import type { Kysely } from 'kysely';
import type { Config } from '../config/config.ts';
import type { Database } from '../db/database.ts';
import { parseCursor } from '../feed/cursor.ts';
import { ApiError } from '../errors.ts';
import { type Backoff, toJobInput } from '../queues/validate.ts';
import type { Follower } from './follower.ts';
import {
  type CatchUp,
  type ScheduleStatus,
  checkCron,
  deleteSchedule,
  listSchedules,
  putSchedule,
  setSchedulePaused,
} from './schedules.ts';
import type { Scheduler } from './scheduler.ts';
import {
  deletedResponse,
  nameParams,
  scheduleBody,
  scheduleListResponse,
  scheduleResponse,
  subscriptionBody,
  subscriptionListResponse,
  subscriptionResponse,
} from './schemas.ts';
import {
  createSubscription,
  deleteSubscription,
  listSubscriptions,
  setSubscriptionPaused,
} from './subscriptions.ts';

type JobOptions = { priority?: number; maxAttempts?: number; backoff?: Backoff };
type NameReq = { Params: { name: string } };
const ADMIN = { access: 'admin' } as const;

/** The schedule as JSON, its payload parsed back (it is stored as JSON text). */
const showSchedule = (s: ScheduleStatus) => ({ ...s, payload: JSON.parse(s.payload) as unknown });

export function flowRoutes(
  app: FastifyInstance,
  deps: { db: Kysely<Database>; config: Config; follower: Follower; scheduler: Scheduler },
): void {
  const { db, config, follower, scheduler } = deps;
  const notFound = (what: 'subscription' | 'schedule', name: string) =>
    new ApiError(404, `${what}_not_found`, `no ${what} named ${name}`);

  app.post<{
    Body: { name: string; stream: string; type?: string; queue: string; from: string; job?: JobOptions };
  }>(
    '/v1/subscriptions',
    {
      config: ADMIN,
      schema: {
        tags: ['subscriptions'],
        summary: 'Subscribe a queue to a stream: every event becomes one job',
        body: subscriptionBody,
        response: subscriptionResponse,
      },
    },
    async (request, reply) => {
      const b = request.body;
      const from = b.from === 'earliest' || b.from === 'latest' ? b.from : parseCursor(b.from);
      if (from === undefined) {
        throw new ApiError(400, 'invalid_cursor', `malformed cursor ${JSON.stringify(b.from.slice(0, 80))}`);
      }
      // The same rules as an enqueue's job options (defaults included).
      const job = toJobInput(b.queue, { payload: null, ...b.job }, config.maxEventBytes, 'body/job');
      const sub = await createSubscription(db, {
        name: b.name,
        stream: b.stream,
        type: b.type ?? null,
        queue: b.queue,
        priority: job.priority,
        maxAttempts: job.maxAttempts,
        backoff: job.backoff,
        from,
      });
      follower.wake();
      return reply.code(201).send(sub);
    },
  );

  app.get(
    '/v1/subscriptions',
    {
      config: ADMIN,
      schema: { tags: ['subscriptions'], summary: 'Every subscription', response: subscriptionListResponse },
    },
    async () => ({ subscriptions: await listSubscriptions(db, null) }),
  );

  app.get<NameReq>(
    '/v1/subscriptions/:name',
    {
      config: ADMIN,
      schema: {
        tags: ['subscriptions'],
        summary: 'One subscription: cursor, jobs made, events lost to retention',
        params: nameParams,
        response: subscriptionResponse,
      },
    },
    async (request) => {
      const [sub] = await listSubscriptions(db, request.params.name);
      if (!sub) throw notFound('subscription', request.params.name);
      return sub;
    },
  );

  app.delete<NameReq>(
    '/v1/subscriptions/:name',
    {
      config: ADMIN,
      schema: {
        tags: ['subscriptions'],
        summary: 'Delete a subscription (its jobs stay queued)',
        params: nameParams,
        response: deletedResponse,
      },
    },
    async (request, reply) => {
      if (!(await deleteSubscription(db, request.params.name)))
        throw notFound('subscription', request.params.name);
      return reply.code(204).send();
    },
  );

  app.put<{
    Params: { name: string };
    Body: {
      cron: string;
      timezone: string;
      queue: string;
      payload?: unknown;
      catchUp: CatchUp;
      catchUpMax: number;
      job?: JobOptions;
    };
  }>(
    '/v1/schedules/:name',
    {
      config: ADMIN,
      schema: {
        tags: ['schedules'],
        summary: 'Create or replace a cron schedule: every tick enqueues one job',
        params: nameParams,
        body: scheduleBody,
        response: scheduleResponse,
      },
    },
    async (request, reply) => {
      const b = request.body;
      checkCron(b.cron, b.timezone);
      const job = toJobInput(b.queue, { payload: b.payload ?? null, ...b.job }, config.maxEventBytes, 'body');
      const { schedule, created } = await putSchedule(db, {
        name: request.params.name,
        cron: b.cron,
        timezone: b.timezone,
        queue: b.queue,
        payload: job.payload,
        priority: job.priority,
        maxAttempts: job.maxAttempts,
        backoff: job.backoff,
        catchUp: b.catchUp,
        catchUpMax: b.catchUpMax,
      });
      scheduler.wake();
      return reply.code(created ? 201 : 200).send(showSchedule(schedule));
    },
  );

  app.get(
    '/v1/schedules',
    {
      config: ADMIN,
      schema: { tags: ['schedules'], summary: 'Every schedule', response: scheduleListResponse },
    },
    async () => ({ schedules: (await listSchedules(db, null)).map(showSchedule) }),
  );

  app.get<NameReq>(
    '/v1/schedules/:name',
    {
      config: ADMIN,
      schema: {
        tags: ['schedules'],
        summary: 'One schedule: last and next tick, jobs enqueued',
        params: nameParams,
        response: scheduleResponse,
      },
    },
    async (request) => {
      const [s] = await listSchedules(db, request.params.name);
      if (!s) throw notFound('schedule', request.params.name);
      return showSchedule(s);
    },
  );

  app.delete<NameReq>(
    '/v1/schedules/:name',
    {
      config: ADMIN,
      schema: {
        tags: ['schedules'],
        summary: 'Delete a schedule (jobs already enqueued stay)',
        params: nameParams,
        response: deletedResponse,
      },
    },
    async (request, reply) => {
      if (!(await deleteSchedule(db, request.params.name))) throw notFound('schedule', request.params.name);
      return reply.code(204).send();
    },
  );

  for (const action of ['pause', 'resume'] as const) {
    const paused = action === 'pause';
    app.post<NameReq>(
      `/v1/subscriptions/:name/${action}`,
      {
        config: ADMIN,
        schema: {
          tags: ['subscriptions'],
          summary: paused
            ? 'Stop turning events into jobs (the cursor waits; retention may overtake it)'
            : 'Turn events into jobs again, from the cursor',
          params: nameParams,
          response: subscriptionResponse,
        },
      },
      async (request) => {
        const sub = await setSubscriptionPaused(db, request.params.name, paused);
        if (!sub) throw notFound('subscription', request.params.name);
        if (!paused) follower.wake();
        return sub;
      },
    );
    app.post<NameReq>(
      `/v1/schedules/:name/${action}`,
      {
        config: ADMIN,
        schema: {
          tags: ['schedules'],
          summary: paused
            ? 'Stop enqueueing ticks'
            : 'Enqueue ticks again (those passed meanwhile follow the catch-up policy)',
          params: nameParams,
          response: scheduleResponse,
        },
      },
      async (request) => {
        const s = await setSchedulePaused(db, request.params.name, paused);
        if (!s) throw notFound('schedule', request.params.name);
        if (!paused) scheduler.wake();
        return showSchedule(s);
      },
    );
  }
}
