/**
 * The queues' hot SQL, in one place. Every function takes `(db | trx, ...)` like src/feed/queries.ts,
 * so the same code serves the group-commit batchers, the HTTP transaction endpoint and the SQL/library
 * API (the caller's transaction). Functions that write more than one statement run them in `db`'s
 * transaction, or open one when `db` is the pool.
 *
 * States: 'ready' (claimable from run_at: a future run_at is a delayed job), 'leased' (held until
 * lease_expires_at, then claimable again), 'dead' (out of attempts). An ack deletes the row and counts
 * it in commitfeed.queues.completed, so the claim query never wades through history.
 */
import { sql } from 'kysely';
import type { Db } from '../db/database.ts';
import { type EventInput, appendEvents } from '../feed/queries.ts';

/** The feed stream that carries a queue's wake-ups. User stream names cannot contain '/'. */
export const queueStream = (queue: string): string => `queue/${queue}`;

/** One job to enqueue, already validated (see validate.ts). */
export interface JobInput {
  queue: string;
  /** JSON text, stored and served back byte for byte. */
  payload: string;
  priority: number;
  /** Seconds from now; ignored when runAt is set. */
  delay: number;
  /** ISO timestamp, or null. */
  runAt: string | null;
  key: string | null;
  maxAttempts: number;
  /** Normalised backoff as JSON text: {"type","delay","max","jitter"}. */
  backoff: string;
}

export interface EnqueueResult {
  id: string;
  queue: string;
  /** True when `key` matched a job of the queue not yet completed: nothing was enqueued. */
  duplicate: boolean;
}

const keyOf = (queue: string, key: string) => `${queue}\u0000${key}`;

/** Runs `fn` in `db`'s transaction, or in a new one when `db` is the pool. */
export function inTransaction<T>(db: Db, fn: (trx: Db) => Promise<T>): Promise<T> {
  return db.isTransaction ? fn(db) : db.transaction().execute(fn);
}

/**
 * Enqueues jobs and appends one wake-up row per queue to the feed (stream `queue/<name>`, type
 * `enqueued`, data `{"jobs":<n>}`) with appendEvents, whose pg_notify is delivered at commit: waiting
 * claimers wake exactly when the jobs become visible, and never for a rolled-back enqueue. The row is
 * a bare wake marker (claimers read the jobs table, not the feed), so it stays small whatever the
 * payloads. Jobs whose `key` matches a job of their queue not yet completed are not enqueued: their
 * result carries the existing id and `duplicate: true`.
 *
 * @example
 *   await db.transaction().execute(async (trx) => {
 *     await trx.insertInto('orders').values(order).execute();
 *     await enqueueJobs(trx, [{ queue: 'emails', payload: JSON.stringify({ to }), priority: 0, delay: 0,
 *       runAt: null, key: null, maxAttempts: 5, backoff: DEFAULT_BACKOFF }]);
 *   });
 */
export function enqueueJobs(db: Db, jobs: readonly JobInput[]): Promise<EnqueueResult[]> {
  return inTransaction(db, async (trx) => {
    // A key repeated within the call is enqueued once; later copies report the first.
    const firstOfKey = new Map<string, number>();
    const unique: JobInput[] = [];
    const slot: number[] = [];
    for (const j of jobs) {
      if (j.key !== null) {
        const k = keyOf(j.queue, j.key);
        const seen = firstOfKey.get(k);
        if (seen !== undefined) {
          slot.push(seen);
          continue;
        }
        firstOfKey.set(k, unique.length);
      }
      slot.push(unique.length);
      unique.push(j);
    }
    const results: (EnqueueResult | undefined)[] = new Array(unique.length);
    const inserted = new Map<string, number>();
    // A duplicate's original may be acked (deleted) between our conflict and our look-up: then the
    // key is free again and the next round inserts it.
    let todo = unique.map((_, i) => i);
    for (let round = 0; todo.length > 0; round++) {
      if (round === 5) throw new Error('enqueue: key dedup did not settle after 5 rounds');
      const batch = todo.map((i) => unique[i]);
      const { rows } = await sql<{ id: string; queue: string; key: string | null }>`
        with q as (
          insert into commitfeed.queues (name) select distinct unnest(${[...new Set(batch.map((j) => j.queue))]}::text[])
          on conflict do nothing
        ), ins as (
          insert into commitfeed.jobs (queue, payload, priority, run_at, key, max_attempts, backoff)
          select t.queue, t.payload, t.priority,
                 coalesce(t.run_at, clock_timestamp() + make_interval(secs => t.delay)),
                 t.key, t.max_attempts, t.backoff
          from unnest(${batch.map((j) => j.queue)}::text[], ${batch.map((j) => j.payload)}::json[],
                      ${batch.map((j) => j.priority)}::int4[], ${batch.map((j) => j.delay)}::float8[],
                      ${batch.map((j) => j.runAt)}::timestamptz[], ${batch.map((j) => j.key)}::text[],
                      ${batch.map((j) => j.maxAttempts)}::int4[], ${batch.map((j) => j.backoff)}::jsonb[])
            as t(queue, payload, priority, delay, run_at, key, max_attempts, backoff)
          on conflict (queue, key) where key is not null do nothing
          returning id, queue, key
        )
        select id::text as id, queue, key from ins`.execute(trx);
      // RETURNING yields rows in insertion order; rows skipped by ON CONFLICT are absent, so keyed rows
      // are matched by (queue, key) and unkeyed ones by position among the unkeyed.
      const byKey = new Map<string, EnqueueResult>();
      let r = 0;
      for (const row of rows) {
        const res: EnqueueResult = { id: row.id, queue: row.queue, duplicate: false };
        inserted.set(row.queue, (inserted.get(row.queue) ?? 0) + 1);
        if (row.key !== null) byKey.set(keyOf(row.queue, row.key), res);
        else {
          while (batch[r].key !== null) r++;
          results[todo[r++]] = res;
        }
      }
      const missing: number[] = [];
      for (const i of todo) {
        const j = unique[i];
        if (j.key === null) continue;
        const found = byKey.get(keyOf(j.queue, j.key));
        if (found) results[i] = found;
        else missing.push(i);
      }
      if (missing.length === 0) break;
      const existing = await findByKeys(
        trx,
        missing.map((i) => unique[i]),
      );
      todo = [];
      for (const i of missing) {
        const j = unique[i];
        const id = existing.get(keyOf(j.queue, j.key!));
        if (id) results[i] = { id, queue: j.queue, duplicate: true };
        else todo.push(i);
      }
    }
    if (inserted.size > 0) {
      await appendEvents(
        trx,
        [...inserted].map(([queue, n]) => wake(queue, 'enqueued', `{"jobs":${n}}`)),
      );
    }
    const seenSlot = new Set<number>();
    return slot.map((s) => {
      const res = results[s]!;
      if (seenSlot.has(s)) return { ...res, duplicate: true };
      seenSlot.add(s);
      return res;
    });
  });
}

function wake(queue: string, type: string, data: string): EventInput {
  return { stream: queueStream(queue), type, key: null, data };
}

async function findByKeys(db: Db, jobs: JobInput[]): Promise<Map<string, string>> {
  const { rows } = await sql<{ queue: string; key: string; id: string }>`
    select j.queue, j.key, j.id::text as id
    from commitfeed.jobs j
    join unnest(${jobs.map((x) => x.queue)}::text[], ${jobs.map((x) => x.key)}::text[]) as k(queue, key)
      on j.queue = k.queue and j.key = k.key`.execute(db);
  return new Map(rows.map((r) => [keyOf(r.queue, r.key), r.id]));
}

export interface ClaimedJob {
  id: string;
  /** JSON text as enqueued. */
  payload: string;
  attempt: number;
  maxAttempts: number;
  lease: string;
  /** epoch milliseconds */
  leaseExpiresAt: number;
}

export interface ClaimResult {
  jobs: ClaimedJob[];
  /** Expired leases this statement released (made ready, or dead when out of attempts). Their jobs
   * were not claimable by this statement's snapshot: claim again to take them. */
  reaped: number;
}

/**
 * Claims up to `max` ready, due jobs of `queue` (priority, then age), each with a fresh lease token,
 * in one statement. `FOR UPDATE SKIP LOCKED`: concurrent claimers never wait on each other and never
 * get the same job. The same statement releases the queue's expired leases (crash recovery: a job
 * whose worker vanished is claimable again once its lease runs out, and its attempt counts; out of
 * attempts, it is dead-lettered with `lease expired` as its last error). A paused queue hands out
 * nothing.
 */
export async function claimJobs(
  db: Db,
  queue: string,
  max: number,
  leaseSeconds: number,
): Promise<ClaimResult> {
  const { rows } = await sql<{
    id: string | null;
    payload: string;
    attempt: number;
    max_attempts: number;
    lease: string;
    expires_ms: number;
    reaped: number;
  }>`
    with reaped as (
      update commitfeed.jobs j
      set state = case when j.attempt >= j.max_attempts then 'dead' else 'ready' end,
          dead_at = case when j.attempt >= j.max_attempts then clock_timestamp() end,
          lease_expires_at = null,
          last_error = 'lease expired'
      where j.id in (select x.id from commitfeed.jobs x
                     where x.queue = ${queue} and x.state = 'leased' and x.lease_expires_at <= clock_timestamp()
                     for update skip locked)
      returning 1
    ), picked as (
      select x.id from commitfeed.jobs x
      where x.queue = ${queue} and x.state = 'ready' and x.run_at <= clock_timestamp()
        and not coalesce((select q.paused from commitfeed.queues q where q.name = ${queue}), false)
      order by x.priority, x.run_at, x.id
      limit ${max}
      for update skip locked
    ), claimed as (
      update commitfeed.jobs j
      set state = 'leased', attempt = j.attempt + 1, lease = gen_random_uuid(),
          lease_expires_at = clock_timestamp() + make_interval(secs => ${leaseSeconds}::float8)
      from picked where j.id = picked.id
      returning j.id, j.payload, j.attempt, j.max_attempts, j.lease, j.lease_expires_at, j.priority, j.run_at
    )
    select c.id::text as id, c.payload::text as payload, c.attempt, c.max_attempts, c.lease::text as lease,
           extract(epoch from c.lease_expires_at)::float8 * 1000 as expires_ms,
           (select count(*) from reaped)::int4 as reaped
    from (select 1) one left join claimed c on true
    order by c.priority, c.run_at, c.id`.execute(db);
  return {
    reaped: rows[0].reaped,
    jobs:
      rows[0].id === null
        ? []
        : rows.map((r) => ({
            id: r.id!,
            payload: r.payload,
            attempt: r.attempt,
            maxAttempts: r.max_attempts,
            lease: r.lease,
            leaseExpiresAt: r.expires_ms,
          })),
  };
}

/**
 * When `queue` next has something to hand out without an enqueue: the earliest delayed job coming
 * due or lease expiring (epoch ms), `0` when jobs are due already (held by a concurrent claim, or
 * committed after a claim's snapshot: try again), or null when nothing is pending or the queue is
 * paused (an enqueue or a resume wakes claimers through the feed).
 */
export async function nextDue(db: Db, queue: string): Promise<number | null> {
  const { rows } = await sql<{ due: number | null; now: boolean; paused: boolean }>`
    select coalesce((select q.paused from commitfeed.queues q where q.name = ${queue}), false) as paused,
           exists (select 1 from commitfeed.jobs x
                   where x.queue = ${queue} and x.state = 'ready' and x.run_at <= clock_timestamp()) as now,
           extract(epoch from least(
             (select min(x.run_at) from commitfeed.jobs x where x.queue = ${queue} and x.state = 'ready'),
             (select min(x.lease_expires_at) from commitfeed.jobs x where x.queue = ${queue} and x.state = 'leased')
           ))::float8 * 1000 as due`.execute(db);
  const r = rows[0];
  if (r.paused) return null;
  if (r.now) return 0;
  return r.due;
}

/** One settle (ack) request: the job and the lease its worker holds. */
export interface LeaseRef {
  queue: string;
  id: string;
  lease: string;
}

export type SettleResult = { ok: true } | { ok: false; status: 404 | 409; code: string; message: string };

const OK: SettleResult = { ok: true };

/**
 * Acks (completes) jobs in one statement: each job is deleted only if it is still held by the lease
 * presented and that lease has not expired (fencing: a stale worker cannot complete a job someone else
 * now holds), and counted in its queue's `completed`. One result per item, in order; a failed item
 * changes nothing.
 */
export async function ackJobs(db: Db, items: readonly LeaseRef[]): Promise<SettleResult[]> {
  const { rows } = await sql<{ id: string }>`
    with del as (
      delete from commitfeed.jobs j
      using unnest(${items.map((i) => i.id)}::int8[], ${items.map((i) => i.lease)}::text[],
                   ${items.map((i) => i.queue)}::text[]) as a(id, lease, queue)
      where j.id = a.id and j.queue = a.queue and j.state = 'leased' and j.lease::text = a.lease
        and j.lease_expires_at > clock_timestamp()
      returning j.id, j.queue
    ), counted as (
      update commitfeed.queues q set completed = q.completed + d.n
      from (select queue, count(*) as n from del group by queue) d
      where q.name = d.queue
    )
    select id::text as id from del`.execute(db);
  const done = new Set(rows.map((r) => r.id));
  // An id given twice is completed once: the later copies fail like any stale ack.
  const settled = new Set<string>();
  const ok = items.map((i) => {
    if (!done.has(i.id) || settled.has(i.id)) return false;
    settled.add(i.id);
    return true;
  });
  if (ok.every(Boolean)) return items.map(() => OK);
  const why = await whyNot(
    db,
    items.filter((_, n) => !ok[n]),
  );
  return items.map((i, n) => (ok[n] ? OK : why(i)));
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
    if (!row || row.queue !== i.queue) {
      return {
        ok: false,
        status: 404,
        code: 'job_not_found',
        message: `no job ${i.id} in queue ${i.queue}: it was completed already, or never existed`,
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
    await appendEvents(trx, [wake(ref.queue, r.state === 'dead' ? 'dead' : 'retry', `{"id":"${ref.id}"}`)]);
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

export interface QueueStats {
  name: string;
  paused: boolean;
  /** Claimable now (expired leases included: the next claim releases them). */
  ready: number;
  /** Waiting for their run time (delay, runAt or a retry backoff). */
  delayed: number;
  /** Held by a live lease. */
  leased: number;
  dead: number;
  /** Acked since the queue was created. */
  completed: number;
  /** Seconds the oldest claimable job has been waiting (0 when none). */
  oldestReadyAgeSeconds: number;
}

/** Counts by state for one queue (undefined when it does not exist) or for every queue. */
export async function queueStats(db: Db, queue: string | null): Promise<QueueStats[]> {
  const { rows } = await sql<{
    name: string;
    paused: boolean;
    ready: number;
    delayed: number;
    leased: number;
    dead: number;
    completed: string;
    oldest: number | null;
  }>`
    select q.name, q.paused, q.completed::text as completed,
           count(*) filter (where (j.state = 'ready' and j.run_at <= now())
                               or (j.state = 'leased' and j.lease_expires_at <= now()))::int4 as ready,
           count(*) filter (where j.state = 'ready' and j.run_at > now())::int4 as delayed,
           count(*) filter (where j.state = 'leased' and j.lease_expires_at > now())::int4 as leased,
           count(*) filter (where j.state = 'dead')::int4 as dead,
           extract(epoch from now() - min(j.run_at) filter (where j.state = 'ready' and j.run_at <= now()))::float8 as oldest
    from commitfeed.queues q
    left join commitfeed.jobs j on j.queue = q.name
    where ${queue}::text is null or q.name = ${queue}
    group by q.name, q.paused, q.completed
    order by q.name`.execute(db);
  return rows.map((r) => ({
    name: r.name,
    paused: r.paused,
    ready: r.ready,
    delayed: r.delayed,
    leased: r.leased,
    dead: r.dead,
    completed: Number(r.completed),
    oldestReadyAgeSeconds: Math.max(0, r.oldest ?? 0),
  }));
}

export interface DeadJob {
  id: string;
  payload: string;
  attempt: number;
  maxAttempts: number;
  lastError: string | null;
  /** epoch ms */
  createdAt: number;
  deadAt: number;
}

/** Dead jobs of `queue` after id `after`, oldest first. */
export async function listDead(
  db: Db,
  queue: string,
  after: string | null,
  limit: number,
): Promise<DeadJob[]> {
  const { rows } = await sql<{
    id: string;
    payload: string;
    attempt: number;
    max_attempts: number;
    last_error: string | null;
    created_ms: number;
    dead_ms: number;
  }>`
    select j.id::text as id, j.payload::text as payload, j.attempt, j.max_attempts, j.last_error,
           extract(epoch from j.created_at)::float8 * 1000 as created_ms,
           extract(epoch from j.dead_at)::float8 * 1000 as dead_ms
    from commitfeed.jobs j
    where j.queue = ${queue} and j.state = 'dead' and j.id > ${after ?? '0'}::int8
    order by j.id
    limit ${limit}`.execute(db);
  return rows.map((r) => ({
    id: r.id,
    payload: r.payload,
    attempt: r.attempt,
    maxAttempts: r.max_attempts,
    lastError: r.last_error,
    createdAt: r.created_ms,
    deadAt: r.dead_ms,
  }));
}

/**
 * Redrives dead jobs of `queue` (one by id, or all when `id` is null): ready now with a fresh set of
 * attempts; their last error is kept until they fail again. Wakes claimers through the feed. Returns
 * the ids redriven.
 */
export function retryDead(db: Db, queue: string, id: string | null): Promise<string[]> {
  return inTransaction(db, async (trx) => {
    const { rows } = await sql<{ id: string }>`
      update commitfeed.jobs j
      set state = 'ready', attempt = 0, run_at = clock_timestamp(), dead_at = null, lease = null
      where j.queue = ${queue} and j.state = 'dead' and (${id}::int8 is null or j.id = ${id}::int8)
      returning j.id::text as id`.execute(trx);
    if (rows.length > 0) await appendEvents(trx, [wake(queue, 'enqueued', `{"jobs":${rows.length}}`)]);
    return rows.map((r) => r.id);
  });
}

/** Pauses or resumes `queue` (creating it if needed). Resuming wakes waiting claimers through the feed. */
export function setPaused(db: Db, queue: string, paused: boolean): Promise<void> {
  return inTransaction(db, async (trx) => {
    await sql`
      insert into commitfeed.queues (name, paused) values (${queue}, ${paused})
      on conflict (name) do update set paused = excluded.paused`.execute(trx);
    if (!paused) await appendEvents(trx, [wake(queue, 'resumed', '{}')]);
  });
}
