/**
 * The delivery log: one row per attempt (time, status, latency, error, the first KiB of the
 * response), written in groups (one statement for the attempts of concurrent deliveries) together
 * with the endpoint's counts and failure streak. Trimmed by the janitor after RETENTION
 * (attemptRetention).
 */
import { CompiledQuery, sql } from 'kysely';
import type { Db } from '../db/database.ts';
import type { JanitorTask } from '../retention/janitor.ts';

export interface Attempt {
  endpoint: string;
  /** The event's id (its cursor): the `webhook-id` header. */
  eventId: string;
  jobId: string | null;
  attempt: number;
  at: Date;
  ok: boolean;
  status: number | null;
  latencyMs: number;
  error: string | null;
  response: string | null;
}

const RECORD_SQL = `
  with a as (
    select * from unnest($1::text[], $2::text[], $3::int8[], $4::int4[], $5::timestamptz[], $6::bool[],
                         $7::int4[], $8::float8[], $9::text[], $10::text[])
      as a(endpoint, event_id, job_id, attempt, at, ok, status, latency_ms, error, response)
  ), ins as (
    insert into commitfeed.webhook_attempts (endpoint, event_id, job_id, attempt, at, ok, status, latency_ms,
                                             error, response)
    select endpoint, event_id, job_id, attempt, at, ok, status, latency_ms, error, response from a
  ), per as (
    select a.endpoint, count(*) filter (where a.ok) as delivered, count(*) filter (where not a.ok) as failed,
           max(a.at) filter (where a.ok) as last_ok, min(a.at) filter (where not a.ok) as first_fail
    from a group by a.endpoint
  ), streak as (
    -- The first failure after the group's last success starts a new streak.
    select per.*, (select min(b.at) from a b
                   where b.endpoint = per.endpoint and not b.ok and b.at > per.last_ok) as fail_after_ok
    from per
  )
  update commitfeed.webhook_endpoints e
  set delivered = e.delivered + s.delivered, failed_attempts = e.failed_attempts + s.failed,
      last_success_at = greatest(e.last_success_at, s.last_ok),
      failing_since = case when s.last_ok is null then coalesce(e.failing_since, s.first_fail)
                           else s.fail_after_ok end
  from streak s where e.name = s.endpoint
  returning e.name, extract(epoch from e.failing_since)::float8 * 1000 as failing_ms`;

/**
 * Writes attempts in one statement. Returns, per item, since when its endpoint has been failing (epoch
 * ms; null: its last attempt succeeded), or undefined when the endpoint is gone.
 */
export async function recordAttempts(
  db: Db,
  items: readonly Attempt[],
): Promise<(number | null | undefined)[]> {
  const col = <T>(f: (a: Attempt) => T) => items.map(f);
  const { rows } = await db.executeQuery<{ name: string; failing_ms: number | null }>(
    CompiledQuery.raw(RECORD_SQL, [
      col((a) => a.endpoint),
      col((a) => a.eventId),
      col((a) => a.jobId),
      col((a) => a.attempt),
      col((a) => a.at.toISOString()),
      col((a) => a.ok),
      col((a) => a.status),
      col((a) => a.latencyMs),
      col((a) => a.error),
      col((a) => a.response),
    ]),
  );
  const failing = new Map(rows.map((r) => [r.name, r.failing_ms]));
  return items.map((a) => failing.get(a.endpoint));
}

export interface AttemptView {
  eventId: string;
  attempt: number;
  at: string;
  ok: boolean;
  status: number | null;
  latencyMs: number;
  error: string | null;
  response: string | null;
}

/**
 * The endpoint's latest attempts (newest first), optionally of one event (`eventIds`: the texts its
 * id may have in the log), before an attempt id (paging).
 */
export async function listAttempts(
  db: Db,
  endpoint: string,
  opts: { eventIds?: string[]; limit: number; before?: string },
): Promise<(AttemptView & { id: string })[]> {
  const { rows } = await sql<{
    id: string;
    event_id: string;
    attempt: number;
    at: Date;
    ok: boolean;
    status: number | null;
    latency_ms: number;
    error: string | null;
    response: string | null;
  }>`
    select a.id::text as id, a.event_id, a.attempt, a.at, a.ok, a.status, a.latency_ms, a.error, a.response
    from commitfeed.webhook_attempts a
    where a.endpoint = ${endpoint} and (${opts.eventIds ?? null}::text[] is null or a.event_id = any (${opts.eventIds ?? null}::text[]))
      and (${opts.before ?? null}::int8 is null or a.id < ${opts.before ?? null}::int8)
    -- Qualified: a bare \`id\` would name the text output and sort "99" before "100".
    order by a.id desc limit ${opts.limit}`.execute(db);
  return rows.map((r) => ({
    id: r.id,
    eventId: r.event_id,
    attempt: r.attempt,
    at: r.at.toISOString(),
    ok: r.ok,
    status: r.status,
    latencyMs: r.latency_ms,
    error: r.error,
    response: r.response,
  }));
}

/** The janitor's step: delivery log rows older than `retentionMs`, in batches. */
export function attemptRetention(retentionMs: number): JanitorTask {
  return {
    name: 'webhook attempts',
    run: async (db, now) => {
      const before = new Date(now.getTime() - retentionMs).toISOString();
      let total = 0;
      for (let i = 0; i < 100; i++) {
        const { numAffectedRows } = await sql`
          delete from commitfeed.webhook_attempts
          where id = any (array(select id from commitfeed.webhook_attempts
                                where at < ${before}::timestamptz limit 1000))`.execute(db);
        const n = Number(numAffectedRows ?? 0);
        total += n;
        if (n < 1000) break;
      }
      return { webhookAttempts: total };
    },
  };
}
