/**
 * Cron schedules' SQL and tick arithmetic: create or replace, list, pause/resume, delete, and one
 * firing (every tick due becomes one job). The scheduler (scheduler.ts) drives firings; the routes
 * the rest. Cron expressions are parsed by cron-parser (5 fields, or 6 with seconds first; `@daily`
 * and friends), evaluated in the schedule's IANA time zone.
 *
 * Exactly once per tick: a firing inserts (schedule, tick) into commitfeed.schedule_ticks — primary
 * key — and enqueues the tick's job in the same transaction, so however many replicas fire at once,
 * one insert wins and the others do nothing. The schedule row is also locked (SKIP LOCKED), which
 * only saves the losers the work.
 */
import { CronExpressionParser } from 'cron-parser';
import { type Kysely, sql } from 'kysely';
import type { Database, Db } from '../db/database.ts';
import { ApiError } from '../errors.ts';
import { type JobInput, enqueueJobs } from '../queues/enqueue.ts';
import type { JanitorTask } from '../retention/janitor.ts';

export const CATCH_UP = ['none', 'last', 'all'] as const;
export type CatchUp = (typeof CATCH_UP)[number];

/** What a schedule is made with and shows in its status. */
interface ScheduleDefinition {
  name: string;
  cron: string;
  timezone: string;
  queue: string;
  /** JSON text, handed to each tick's job as `data`. */
  payload: string;
  priority: number;
  maxAttempts: number;
  catchUp: CatchUp;
  catchUpMax: number;
}

export interface ScheduleInput extends ScheduleDefinition {
  /** Normalised backoff, JSON text. */
  backoff: string;
}

export interface ScheduleStatus extends ScheduleDefinition {
  paused: boolean;
  /** The newest tick handled (enqueued, or skipped by the catch-up policy). */
  lastTick: string | null;
  /** The next tick after now. */
  nextTick: string | null;
  /** Jobs enqueued so far. */
  ticks: number;
  createdAt: string;
}

/** Checks a cron expression and time zone; 400 `invalid_schedule` naming what is wrong. */
export function checkCron(cron: string, timezone: string): void {
  try {
    new Intl.DateTimeFormat('en', { timeZone: timezone });
  } catch {
    throw new ApiError(
      400,
      'invalid_schedule',
      `unknown time zone ${JSON.stringify(timezone)}: use an IANA name such as "UTC" or "Europe/Paris"`,
    );
  }
  try {
    CronExpressionParser.parse(cron, { tz: timezone }).next();
  } catch (err) {
    throw new ApiError(
      400,
      'invalid_schedule',
      `cron ${JSON.stringify(cron)} is not a valid expression (${(err as Error).message}): use 5 fields ` +
        '(minute hour day-of-month month day-of-week), 6 with seconds first, or @hourly/@daily/...',
    );
  }
}

export interface Due {
  /** Ticks to enqueue, oldest first; `late`: more than lateAfterMs behind `now`. */
  fire: { at: Date; late: boolean }[];
  /** The newest tick in (after, now]: where the schedule's progress moves to (null: none). */
  newest: Date | null;
}

/** Most ticks looked at in one firing (a per-second schedule down for days stops here). */
const SCAN_MAX = 100_000;

/**
 * The ticks in (after, now] to enqueue under the catch-up policy: ticks at most `lateAfterMs` old are
 * on time and always fire; of the older (missed) ones, `none` fires none, `last` the newest, `all`
 * the newest `max`. Walks backwards from `now`, so a long outage costs at most what it fires.
 */
export function dueTicks(
  s: { cron: string; timezone: string; catchUp: CatchUp; catchUpMax: number },
  after: Date,
  now: Date,
  lateAfterMs: number,
): Due {
  const it = CronExpressionParser.parse(s.cron, { currentDate: new Date(now.getTime() + 1), tz: s.timezone });
  const fire: { at: Date; late: boolean }[] = [];
  let newest: Date | null = null;
  let late = 0;
  for (let i = 0; i < SCAN_MAX && it.hasPrev(); i++) {
    const at = it.prev().toDate();
    if (at.getTime() <= after.getTime()) break;
    newest ??= at;
    if (now.getTime() - at.getTime() <= lateAfterMs) {
      fire.push({ at, late: false });
      continue;
    }
    if (s.catchUp === 'none' || (s.catchUp === 'last' && late >= 1) || late >= s.catchUpMax) break;
    late++;
    fire.push({ at, late: true });
  }
  return { fire: fire.reverse(), newest };
}

/** The first tick after `now`, or null when the expression has none. */
export function nextTick(cron: string, timezone: string, now: Date): Date | null {
  try {
    return CronExpressionParser.parse(cron, { currentDate: now, tz: timezone }).next().toDate();
  } catch {
    return null;
  }
}

interface Row {
  name: string;
  cron: string;
  timezone: string;
  queue: string;
  payload: string;
  priority: number;
  max_attempts: number;
  backoff: string;
  catch_up: CatchUp;
  catch_up_max: number;
  paused: boolean;
  last_tick: Date | null;
  ticks: string;
  created_at: Date;
}

const COLUMNS = sql`name, cron, timezone, queue, payload::text as payload, priority, max_attempts,
  backoff::text as backoff, catch_up, catch_up_max, paused, last_tick, ticks::text as ticks, created_at`;

function toStatus(r: Row, now: Date): ScheduleStatus {
  return {
    name: r.name,
    cron: r.cron,
    timezone: r.timezone,
    queue: r.queue,
    payload: r.payload,
    priority: r.priority,
    maxAttempts: r.max_attempts,
    catchUp: r.catch_up,
    catchUpMax: r.catch_up_max,
    paused: r.paused,
    lastTick: r.last_tick?.toISOString() ?? null,
    nextTick: nextTick(r.cron, r.timezone, now)?.toISOString() ?? null,
    ticks: Number(r.ticks),
    createdAt: r.created_at.toISOString(),
  };
}

/**
 * Creates a schedule, or replaces the definition of the one with that name (its progress is kept:
 * ticks already handled are not enqueued again). `created` tells which.
 *
 * @example
 *   await putSchedule(db, { name: 'nightly-report', cron: '0 3 * * *', timezone: 'Europe/Paris',
 *     queue: 'reports', payload: '{}', priority: 0, maxAttempts: 5, backoff: '{...}',
 *     catchUp: 'last', catchUpMax: 100 });
 */
export async function putSchedule(
  db: Db,
  s: ScheduleInput,
): Promise<{ schedule: ScheduleStatus; created: boolean }> {
  const { rows } = await sql<Row & { created: boolean }>`
    insert into commitfeed.schedules as x (name, cron, timezone, queue, payload, priority, max_attempts,
                                           backoff, catch_up, catch_up_max)
    values (${s.name}, ${s.cron}, ${s.timezone}, ${s.queue}, ${s.payload}::json, ${s.priority},
            ${s.maxAttempts}, ${s.backoff}::jsonb, ${s.catchUp}, ${s.catchUpMax})
    on conflict (name) do update set cron = excluded.cron, timezone = excluded.timezone,
      queue = excluded.queue, payload = excluded.payload, priority = excluded.priority,
      max_attempts = excluded.max_attempts, backoff = excluded.backoff, catch_up = excluded.catch_up,
      catch_up_max = excluded.catch_up_max
    returning ${COLUMNS}, (xmax = 0) as created`.execute(db);
  const { created, ...row } = rows[0];
  return { schedule: toStatus(row, new Date()), created };
}

/** One schedule, every schedule (`name` null), or only those not paused. */
export async function listSchedules(
  db: Db,
  name: string | null,
  activeOnly = false,
  now = new Date(),
): Promise<ScheduleStatus[]> {
  const { rows } = await sql<Row>`
    select ${COLUMNS} from commitfeed.schedules
    where (${name}::text is null or name = ${name}) and (not ${activeOnly} or not paused)
    order by name`.execute(db);
  return rows.map((r) => toStatus(r, now));
}

/** Sets the paused flag; null when there is no such schedule. Ticks passed while paused are missed
 * ticks on resume (the catch-up policy decides). */
export async function setSchedulePaused(
  db: Db,
  name: string,
  paused: boolean,
): Promise<ScheduleStatus | null> {
  const { rows } = await sql<Row>`
    update commitfeed.schedules set paused = ${paused} where name = ${name}
    returning ${COLUMNS}`.execute(db);
  return rows[0] ? toStatus(rows[0], new Date()) : null;
}

/** Deletes a schedule and its tick history (jobs already enqueued stay); false when there was none. */
export async function deleteSchedule(db: Db, name: string): Promise<boolean> {
  const { numAffectedRows } = await sql`delete from commitfeed.schedules where name = ${name}`.execute(db);
  return Number(numAffectedRows ?? 0) > 0;
}

/**
 * Enqueues the ticks of schedule `name` due at `now`, in one transaction: locks the schedule (SKIP
 * LOCKED: null when another replica is firing it, or it is paused or gone), computes the due ticks
 * from its stored progress, inserts each tick — a tick some replica already inserted is skipped by
 * the primary key — enqueues one job per inserted tick, and moves the progress to the newest tick.
 * Returns the jobs enqueued.
 */
export async function fireSchedule(
  db: Kysely<Database>,
  name: string,
  now: Date,
  lateAfterMs: number,
): Promise<number | null> {
  return db.transaction().execute(async (trx) => {
    const { rows } = await sql<Row>`
      select ${COLUMNS} from commitfeed.schedules
      where name = ${name} and not paused
      for update skip locked`.execute(trx);
    const s = rows[0];
    if (!s) return null;
    const due = dueTicks(
      { cron: s.cron, timezone: s.timezone, catchUp: s.catch_up, catchUpMax: s.catch_up_max },
      s.last_tick ?? s.created_at,
      now,
      lateAfterMs,
    );
    if (due.newest === null) return 0;
    const { rows: won } = await sql<{ tick_at: Date }>`
      insert into commitfeed.schedule_ticks (schedule, tick_at)
      select ${name}, t from unnest(${due.fire.map((f) => f.at.toISOString())}::timestamptz[]) as t
      on conflict do nothing
      returning tick_at`.execute(trx);
    const wonAt = new Set(won.map((w) => w.tick_at.getTime()));
    const fired = due.fire.filter((f) => wonAt.has(f.at.getTime()));
    const jobs: JobInput[] = fired.map((f) => ({
      queue: s.queue,
      payload: `{"schedule":${JSON.stringify(s.name)},"tick":"${f.at.toISOString()}","late":${f.late},"data":${s.payload}}`,
      priority: s.priority,
      delay: 0,
      runAt: null,
      key: null,
      group: null,
      maxAttempts: s.max_attempts,
      backoff: s.backoff,
    }));
    const results = await enqueueJobs(trx, jobs);
    if (results.length > 0) {
      await sql`
        update commitfeed.schedule_ticks t set job_id = j.id
        from unnest(${fired.map((f) => f.at.toISOString())}::timestamptz[], ${results.map((r) => r.id)}::int8[]) as j(at, id)
        where t.schedule = ${name} and t.tick_at = j.at`.execute(trx);
    }
    await sql`
      update commitfeed.schedules
      set last_tick = greatest(last_tick, ${due.newest.toISOString()}::timestamptz), ticks = ticks + ${results.length}
      where name = ${name}`.execute(trx);
    return results.length;
  });
}

/** The janitor's schedule step: tick records past RETENTION. */
export function scheduleTickRetention(retentionMs: number): JanitorTask {
  return {
    name: 'schedules',
    run: async (db, now) => ({
      scheduleTicks: await trimScheduleTicks(db, new Date(now.getTime() - retentionMs)),
    }),
  };
}

/** Deletes tick records older than `before` (the schedule's progress, not these, prevents repeats). */
export async function trimScheduleTicks(db: Db, before: Date): Promise<number> {
  const { numAffectedRows } = await sql`
    delete from commitfeed.schedule_ticks where created_at < ${before.toISOString()}::timestamptz`.execute(
    db,
  );
  return Number(numAffectedRows ?? 0);
}
