/**
 * Settling a claimed job: ack (complete), nack (retry or dead-letter) and extend, each fenced by the
 * lease token of the claim (a stale worker cannot settle a job someone else now holds).
 */
import { CompiledQuery, sql } from 'kysely';
import { afterCommit } from '../db/commit-outcome.ts';
import { type Db, inTransaction } from '../db/database.ts';
import { prepared } from '../db/prepared.ts';
import { appendEvents } from '../feed/queries/append.ts';
import { wakeEvent } from './wake-stream.ts';

export interface LeaseRef {
  queue: string;
  id: string;
  lease: string;
}

export type SettleResult = { ok: true } | { ok: false; status: 404 | 409; code: string; message: string };

const OK: SettleResult = { ok: true };

/** An ack: the lease, and optionally the job's result (JSON text, already bounded by the caller). */
export interface AckItem extends LeaseRef {
  result?: string | null;
}

/** The ack statement: a fixed text, run as a named prepared statement (see claim.ts CLAIM_SQL). */
const ACK_SQL = prepared(`
    with done as (
      update commitfeed.jobs j
      set state = 'completed', finished_at = clock_timestamp(), result = a.result,
          lease = null, lease_expires_at = null
      from unnest($1::int8[], $2::text[], $3::text[], $4::json[])
           as a(id, lease, queue, result)
      -- "(...) is true": the same test, but one that does not let the planner pick the partial index
      -- of leased jobs (jobs_lease_idx, which also holds every lease ended since the last vacuum, and
      -- whose statistics are often stale): each job is found by its primary key, whatever the table
      -- held when this prepared statement was planned (a full scan of that index per ack was
      -- measured at 11 ms per ack of 10 while 20,000 jobs drained). "j.id = any($1)" repeats the join
      -- as a condition on jobs alone: a plan made while the table was empty (after a purge's VACUUM)
      -- otherwise scans the whole table and joins (auto_explain: 5-20 ms per ack beside 1,000 jobs);
      -- with it even that plan probes the primary key.
      where j.id = any($1::int8[]) and j.id = a.id and j.queue = a.queue and (j.state = 'leased') is true and j.lease::text = a.lease
        and j.lease_expires_at > clock_timestamp()
      returning j.id, j.queue, j.group_key
    ), counted as (
      update commitfeed.queues q set completed = q.completed + d.n
      from (select queue, count(*) as n from done group by queue) d
      where q.name = d.queue
      returning q.name, q.concurrency, d.n
    ), released as (
      select w.name, count(*) filter (where d.group_key is not null) as grouped, min(w.n) as n,
             bool_or(w.concurrency is not null) as limited
      from counted w join done d on d.queue = w.name
      group by w.name
    ), woke as (
      select commitfeed.append_unchecked(array_agg('queue/' || r.name order by r.name),
                               array_fill('released'::text, array[count(*)::int4]),
                               array_fill(null::text, array[count(*)::int4]),
                               array_agg(format('{"jobs":%s}', case when r.limited then r.n else r.grouped end)::json
                                         order by r.name))
      from released r where r.limited or r.grouped > 0
      having count(*) > 0
    )
    select d.id::text as id, (select count(*) from woke) as woke from done d`);

/**
 * Acks (completes) jobs in one statement: each job is completed only if it is still held by the lease
 * presented and that lease has not expired (fencing: a stale worker cannot complete a job someone else
 * now holds), keeps its result and stays readable (state 'completed') until the janitor removes it
 * after the job retention, and is counted in its queue's `completed`. One result per item, in order; a
 * failed item changes nothing.
 *
 * Completing a job of an ordered group, or of a queue with a concurrency limit, lets another job go:
 * a `released` wake-up row (data `{"jobs":<n>}`) commits with the ack for those queues, so waiting
 * claimers on every replica look again. Other acks write no feed row and notify nobody.
 */
export async function ackJobs(db: Db, items: readonly AckItem[]): Promise<SettleResult[]> {
  return (await ackJobsWaking(db, items)).results;
}

/** ackJobs, also telling whether the statement wrote a `released` wake-up row (`woke`): only then
 * has the feed something new for this process's tailer to read. */
export async function ackJobsWaking(
  db: Db,
  items: readonly AckItem[],
): Promise<{ results: SettleResult[]; woke: boolean }> {
  const { rows } = await db.executeQuery<{ id: string; woke: string }>(
    CompiledQuery.raw(ACK_SQL, [
      items.map((i) => i.id),
      items.map((i) => i.lease),
      items.map((i) => i.queue),
      items.map((i) => i.result ?? null),
    ]),
  );
  const done = new Set(rows.map((r) => r.id));
  // An id given twice is completed once: the later copies fail like any stale ack.
  const settled = new Set<string>();
  const ok = items.map((i) => {
    if (!done.has(i.id) || settled.has(i.id)) return false;
    settled.add(i.id);
    return true;
  });
  const woke = rows.length > 0 && Number(rows[0].woke) > 0;
  if (ok.every(Boolean)) return { results: items.map(() => OK), woke };
  const refused = items.filter((_, n) => !ok[n]);
  // Outside a transaction the acks above are committed: losing the database now loses only the answer.
  const why = await (db.isTransaction ? whyNot(db, refused) : afterCommit(() => whyNot(db, refused)));
  return { results: items.map((i, n) => (ok[n] ? OK : why(i))), woke };
}

const UNLEASE_SQL = prepared(`
    with back as (
      update commitfeed.jobs j
      set state = 'ready', attempt = j.attempt - 1, lease = null, lease_expires_at = null
      from unnest($1::int8[], $2::text[]) as a(id, lease)
      where j.id = a.id and j.queue = $3 and j.state = 'leased' and j.lease::text = a.lease
      returning j.id
    ), woke as (
      select commitfeed.append_unchecked(array['queue/' || $3::text], array['released'], array[null::text],
                                         array[format('{"jobs":%s}', count(*))::json])
      from back having count(*) > 0
    )
    select (select count(*) from back)::int4 as n, (select count(*) from woke)::int4 as woke`);

/**
 * Gives back jobs an enqueue leased to a claim that could not take them (its client had gone): each
 * still held by its lease becomes ready again with its attempt uncounted (it never reached a worker),
 * and a `released` wake-up row lets claims on every replica take it. Returns how many went back.
 */
export async function unleaseJobs(
  db: Db,
  queue: string,
  jobs: readonly { id: string; lease: string }[],
): Promise<number> {
  const { rows } = await db.executeQuery<{ n: number }>(
    CompiledQuery.raw(UNLEASE_SQL, [jobs.map((j) => j.id), jobs.map((j) => j.lease), queue]),
  );
  return rows[0].n;
}

/**
 * Explains why settling `items` failed, for error messages: unknown job, wrong lease or expired lease.
 * Read after the failed write, so it describes a moment later; the failure itself was decided
 * atomically by the write.
 */
async function whyNot(db: Db, items: readonly LeaseRef[]): Promise<(i: LeaseRef) => SettleResult> {
  const { rows } = await sql<{ id: string; queue: string; state: string; lease: string | null }>`
    select j.id::text as id, j.queue, j.state, j.lease::text as lease
    from commitfeed.jobs j where j.id = any(${items.map((i) => i.id)}::int8[])`.execute(db);
  const byId = new Map(rows.map((r) => [r.id, r]));
  return (i) => {
    const row = byId.get(i.id);
    if (row && row.queue === i.queue && (row.state === 'completed' || row.state === 'cancelled')) {
      return {
        ok: false,
        status: 409,
        code: row.state === 'completed' ? 'job_completed' : 'job_cancelled',
        message: `job ${i.id} is ${row.state} already; nothing was changed`,
      };
    }
    if (!row || row.queue !== i.queue) {
      return {
        ok: false,
        status: 404,
        code: 'job_not_found',
        message: `no job ${i.id} in queue ${i.queue}: it never existed, or it finished longer ago than the job retention`,
      };
    }
    if (row.lease === i.lease) {
      return {
        ok: false,
        status: 409,
        code: 'lease_expired',
        message: `the lease on job ${i.id} has expired (the job is ${row.state === 'leased' ? 'claimable again' : row.state}); claim it again to work on it`,
      };
    }
    return {
      ok: false,
      status: 409,
      code: 'lease_mismatch',
      message: `job ${i.id} is not held by this lease (it is ${row.state}${row.state === 'leased' ? ' by another claim' : ''}): a stale or wrong lease token; nothing was changed`,
    };
  };
}

export type NackResult =
  | { ok: true; state: 'ready' | 'dead'; runAt: number; attempt: number }
  | Extract<SettleResult, { ok: false }>;

/**
 * Fails a job held by `lease`: it is retried after `delaySeconds` (else its backoff: exponential or
 * fixed, capped, with jitter unless disabled), or dead-lettered when its attempts are used up; `error`
 * becomes its last error. A feed row (`retry` or `dead`, data `{"id":...}`) commits with it, so
 * waiting claimers re-arm their timers and dead letters can be watched.
 */
export function nackJob(
  db: Db,
  ref: LeaseRef,
  error: string | null,
  delaySeconds: number | null,
): Promise<NackResult> {
  return inTransaction(db, async (trx) => {
    const { rows } = await sql<{ state: 'ready' | 'dead'; run_ms: number; attempt: number }>`
      update commitfeed.jobs j
      set state = case when j.attempt >= j.max_attempts then 'dead' else 'ready' end,
          dead_at = case when j.attempt >= j.max_attempts then clock_timestamp() end,
          run_at = case when j.attempt >= j.max_attempts then j.run_at
                   else clock_timestamp() + make_interval(secs => coalesce(${delaySeconds}::float8,
                     least((j.backoff->>'max')::float8,
                           (j.backoff->>'delay')::float8 *
                             case when j.backoff->>'type' = 'fixed' then 1 else power(2, greatest(j.attempt - 1, 0)) end)
                     * case when (j.backoff->>'jitter')::boolean then 0.5 + random() * 0.5 else 1 end)) end,
          lease = null, lease_expires_at = null, last_error = ${error}
      where j.id = ${ref.id}::int8 and j.queue = ${ref.queue} and j.state = 'leased'
        and j.lease::text = ${ref.lease} and j.lease_expires_at > clock_timestamp()
      returning j.state, extract(epoch from j.run_at)::float8 * 1000 as run_ms, j.attempt`.execute(trx);
    if (rows.length === 0) return (await whyNot(trx, [ref]))(ref) as NackResult;
    const r = rows[0];
    await appendEvents(trx, [
      wakeEvent(ref.queue, r.state === 'dead' ? 'dead' : 'retry', `{"id":"${ref.id}"}`),
    ]);
    return { ok: true, state: r.state, runAt: r.run_ms, attempt: r.attempt };
  });
}

export type ExtendResult = { ok: true; leaseExpiresAt: number } | Extract<SettleResult, { ok: false }>;

/** Extends a live lease to `seconds` from now (a worker's heartbeat on a long job). */
export async function extendLease(db: Db, ref: LeaseRef, seconds: number): Promise<ExtendResult> {
  const { rows } = await sql<{ expires_ms: number }>`
    update commitfeed.jobs j
    set lease_expires_at = clock_timestamp() + make_interval(secs => ${seconds}::float8)
    where j.id = ${ref.id}::int8 and j.queue = ${ref.queue} and j.state = 'leased'
      and j.lease::text = ${ref.lease} and j.lease_expires_at > clock_timestamp()
    returning extract(epoch from j.lease_expires_at)::float8 * 1000 as expires_ms`.execute(db);
  if (rows.length === 0) return (await whyNot(db, [ref]))(ref) as ExtendResult;
  return { ok: true, leaseExpiresAt: rows[0].expires_ms };
}
