/**
 * Cron schedules' routes (`/v1/schedules`): every tick enqueues one job. Administration (admin tokens
 * when access control is on). No SQL here: schedules.ts has it.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../config/config.ts';
import type { Db } from '../db/database.ts';
import { namedResourceRoutes } from './named-routes.ts';
import { ApiError } from '../errors.ts';
import { toJobInput } from '../queues/validate.ts';
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
  ADMIN,
  type JobOptions,
  nameParams,
  scheduleBody,
  scheduleListResponse,
  scheduleResponse,
} from './schemas.ts';

export interface ScheduleRouteDeps {
  db: Db;
  config: Config;
  scheduler: Scheduler;
}

type PutReq = {
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
};

const tags = ['schedules'];

export function scheduleRoutes(app: FastifyInstance, deps: ScheduleRouteDeps): void {
  app.put<PutReq>(
    '/v1/schedules/:name',
    {
      config: ADMIN,
      schema: {
        tags,
        summary: 'Create or replace a cron schedule: every tick enqueues one job',
        params: nameParams,
        body: scheduleBody,
        response: scheduleResponse,
      },
    },
    (request, reply) => putOne(deps, request, reply),
  );
  namedResourceRoutes(app, {
    path: '/v1/schedules',
    tags,
    listKey: 'schedules',
    listResponse: scheduleListResponse,
    response: scheduleResponse,
    summaries: {
      list: 'Every schedule',
      show: 'One schedule: last and next tick, jobs enqueued',
      delete: 'Delete a schedule (jobs already enqueued stay)',
      pause: 'Stop enqueueing ticks',
      resume: 'Enqueue ticks again (those passed meanwhile follow the catch-up policy)',
    },
    list: (name) => listSchedules(deps.db, name),
    remove: (name) => deleteSchedule(deps.db, name),
    setPaused: (name, paused) => setSchedulePaused(deps.db, name, paused),
    notFound,
    show: showSchedule,
    resumed: () => deps.scheduler.wake(),
  });
}

const notFound = (name: string) => new ApiError(404, 'schedule_not_found', `no schedule named ${name}`);

/** The schedule as JSON, its payload parsed back (it is stored as JSON text). */
const showSchedule = (s: ScheduleStatus) => ({ ...s, payload: JSON.parse(s.payload) as unknown });

async function putOne(
  deps: ScheduleRouteDeps,
  request: FastifyRequest<PutReq>,
  reply: FastifyReply,
): Promise<FastifyReply> {
  const { db, config, scheduler } = deps;
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
}
