/**
 * Webhook endpoints' SQL: the endpoint rows (with their secrets: never returned by the API, which
 * shows `Endpoint` without them), their backlog, and the delivery log's grouped write. Every
 * function takes `(db | trx, ...)`.
 */
import { sql } from 'kysely';
import type { Db } from '../db/database.ts';

export type Mode = 'ordered' | 'concurrent';

/** What an endpoint is made with (and may be changed, a field at a time). */
export interface EndpointSettings {
  url: string;
  description: string | null;
  headers: Record<string, string>;
  concurrency: number;
  timeoutMs: number;
  /** Deliveries started per second by one process; null: no limit. */
  rateLimit: number | null;
  enabled: boolean;
}

export interface Endpoint extends EndpointSettings {
  name: string;
  streams: string[];
  types: string[] | null;
  mode: Mode;
  disabledReason: string | null;
  disabledAt: string | null;
  failingSince: string | null;
  lastSuccessAt: string | null;
  delivered: number;
  failedAttempts: number;
  createdAt: string;
  updatedAt: string;
}

/** An endpoint with what signs its deliveries (internal: never in a response or a log line). */
export interface EndpointWithSecrets extends Endpoint {
  secret: string;
  /** The secret before the last rotation, while its overlap lasts. */
  previousSecret: string | null;
  previousUntil: number | null;
}

interface Row {
  name: string;
  url: string;
  streams: string[];
  types: string[] | null;
  description: string | null;
  headers: Record<string, string>;
  mode: Mode;
  concurrency: number;
  timeout_ms: number;
  rate_limit: number | null;
  enabled: boolean;
  disabled_reason: string | null;
  disabled_at: Date | null;
  secret: string;
  previous_secret: string | null;
  previous_until: Date | null;
  failing_since: Date | null;
  last_success_at: Date | null;
  delivered: string;
  failed_attempts: string;
  created_at: Date;
  updated_at: Date;
}

const iso = (d: Date | null) => d?.toISOString() ?? null;

function toEndpoint(r: Row): EndpointWithSecrets {
  return {
    name: r.name,
    url: r.url,
    streams: r.streams,
    types: r.types,
    description: r.description,
    headers: r.headers,
    mode: r.mode,
    concurrency: r.concurrency,
    timeoutMs: r.timeout_ms,
    rateLimit: r.rate_limit,
    enabled: r.enabled,
    disabledReason: r.disabled_reason,
    disabledAt: iso(r.disabled_at),
    failingSince: iso(r.failing_since),
    lastSuccessAt: iso(r.last_success_at),
    delivered: Number(r.delivered),
    failedAttempts: Number(r.failed_attempts),
    createdAt: r.created_at.toISOString(),
    updatedAt: r.updated_at.toISOString(),
    secret: r.secret,
    // An overlap that ended is no overlap.
    previousSecret: r.previous_until && r.previous_until.getTime() > Date.now() ? r.previous_secret : null,
    previousUntil: r.previous_until?.getTime() ?? null,
  };
}

/** The public form: every field but the secrets. */
export function withoutSecrets(e: EndpointWithSecrets): Endpoint {
  const { secret: _s, previousSecret: _p, previousUntil: _u, ...rest } = e;
  return rest;
}

const COLUMNS = sql`name, url, streams, types, description, headers, mode, concurrency, timeout_ms, rate_limit,
  enabled, disabled_reason, disabled_at, secret, previous_secret, previous_until, failing_since,
  last_success_at, delivered::text as delivered, failed_attempts::text as failed_attempts, created_at,
  updated_at`;

export interface NewEndpoint extends EndpointSettings {
  name: string;
  streams: string[];
  types: string[] | null;
  mode: Mode;
  secret: string;
}

/** Inserts an endpoint; null when the name is taken. */
export async function insertEndpoint(db: Db, e: NewEndpoint): Promise<EndpointWithSecrets | null> {
  const { rows } = await sql<Row>`
    insert into commitfeed.webhook_endpoints (name, url, streams, types, description, headers, mode,
      concurrency, timeout_ms, rate_limit, enabled, disabled_reason, disabled_at, secret)
    values (${e.name}, ${e.url}, ${e.streams}::text[], ${e.types}::text[], ${e.description},
      ${JSON.stringify(e.headers)}::jsonb, ${e.mode}, ${e.concurrency}, ${e.timeoutMs}, ${e.rateLimit},
      ${e.enabled}, ${e.enabled ? null : 'created disabled'}, ${e.enabled ? null : new Date()}, ${e.secret})
    on conflict (name) do nothing
    returning ${COLUMNS}`.execute(db);
  return rows[0] ? toEndpoint(rows[0]) : null;
}

/** One endpoint, or every one (`name` null), by name. */
export async function listEndpoints(db: Db, name: string | null): Promise<EndpointWithSecrets[]> {
  const { rows } = await sql<Row>`
    select ${COLUMNS} from commitfeed.webhook_endpoints
    where ${name}::text is null or name = ${name} order by name`.execute(db);
  return rows.map(toEndpoint);
}

/** Changes the given settings (the row locked in the caller's transaction); null when there is none. */
export async function updateEndpoint(
  db: Db,
  name: string,
  p: Partial<EndpointSettings> & { disabledReason?: string | null },
): Promise<EndpointWithSecrets | null> {
  const has = (k: string) => (p as Record<string, unknown>)[k] !== undefined;
  const { rows } = await sql<Row>`
    update commitfeed.webhook_endpoints set
      url = case when ${has('url')} then ${p.url ?? null}::text else url end,
      description = case when ${has('description')} then ${p.description ?? null}::text else description end,
      headers = case when ${has('headers')} then ${JSON.stringify(p.headers ?? {})}::jsonb else headers end,
      concurrency = case when ${has('concurrency')} then ${p.concurrency ?? null}::int4 else concurrency end,
      timeout_ms = case when ${has('timeoutMs')} then ${p.timeoutMs ?? null}::int4 else timeout_ms end,
      rate_limit = case when ${has('rateLimit')} then ${p.rateLimit ?? null}::float8 else rate_limit end,
      enabled = case when ${has('enabled')} then ${p.enabled ?? null}::bool else enabled end,
      -- Enabling clears the reason and the failure streak; disabling records why and when.
      disabled_reason = case when ${p.enabled === true} then null
                             when ${p.enabled === false} then ${p.disabledReason ?? 'disabled over the API'}::text
                             else disabled_reason end,
      disabled_at = case when ${p.enabled === true} then null
                         when ${p.enabled === false} and enabled then clock_timestamp()
                         else disabled_at end,
      failing_since = case when ${p.enabled === true} then null else failing_since end,
      updated_at = clock_timestamp()
    where name = ${name}
    returning ${COLUMNS}`.execute(db);
  return rows[0] ? toEndpoint(rows[0]) : null;
}

/** A new secret; the current one keeps signing until `overlapMs` from now. Null when there is no endpoint. */
export async function rotateSecret(
  db: Db,
  name: string,
  secret: string,
  overlapMs: number,
): Promise<EndpointWithSecrets | null> {
  const { rows } = await sql<Row>`
    update commitfeed.webhook_endpoints
    set previous_secret = secret, secret = ${secret},
        previous_until = clock_timestamp() + make_interval(secs => ${overlapMs / 1000}::float8),
        updated_at = clock_timestamp()
    where name = ${name}
    returning ${COLUMNS}`.execute(db);
  return rows[0] ? toEndpoint(rows[0]) : null;
}

/** Deletes the endpoint, its delivery log, and its queue with every job in it; false when there was none. */
export async function deleteEndpoint(db: Db, name: string, queue: string): Promise<boolean> {
  const { numAffectedRows } = await sql`
    delete from commitfeed.webhook_endpoints where name = ${name}`.execute(db);
  if (Number(numAffectedRows ?? 0) === 0) return false;
  await sql`delete from commitfeed.webhook_attempts where endpoint = ${name}`.execute(db);
  await sql`delete from commitfeed.jobs where queue = ${queue}`.execute(db);
  await sql`delete from commitfeed.queues where name = ${queue}`.execute(db);
  return true;
}

export interface Backlog {
  /** Deliveries waiting (ready, retrying or in flight). */
  pending: number;
  /** Of those, waiting for a retry. */
  retrying: number;
  /** Deliveries that used every attempt (resend them). */
  failed: number;
  /** Seconds since the oldest pending delivery's event was committed (0 when none is). */
  lagSeconds: number;
}

/** Per endpoint queue: what waits, and how far behind it is. */
export async function backlogs(db: Db, queues: readonly string[]): Promise<Map<string, Backlog>> {
  const { rows } = await sql<{
    queue: string;
    pending: number;
    retrying: number;
    failed: number;
    lag: number;
  }>`
    select q.queue,
           count(*) filter (where j.state in ('ready', 'leased'))::int4 as pending,
           count(*) filter (where j.state = 'ready' and j.attempt > 0)::int4 as retrying,
           count(*) filter (where j.state = 'dead')::int4 as failed,
           coalesce(extract(epoch from clock_timestamp() - min((j.payload->>'time')::timestamptz) filter (
             where j.state in ('ready', 'leased'))), 0)::float8 as lag
    from unnest(${[...queues]}::text[]) as q(queue)
    left join commitfeed.jobs j on j.queue = q.queue and j.state in ('ready', 'leased', 'dead')
    group by q.queue`.execute(db);
  return new Map(
    rows.map((r) => [
      r.queue,
      { pending: r.pending, retrying: r.retrying, failed: r.failed, lagSeconds: r.lag },
    ]),
  );
}
