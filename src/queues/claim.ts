/**
 * Claims: one statement hands out ready, due jobs with fresh lease tokens (and releases expired
 * leases), and `nextDue` tells a waiting claim when to look again.
 */
import { CompiledQuery, sql } from 'kysely';
import { type Db, inTransaction } from '../db/database.ts';
import { prepared } from '../db/prepared.ts';

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
  /** Of those, the ones dead-lettered (their lease expired on the last attempt). */
  reapedDead: number;
  /** The statement saw more ready jobs than it took (some may be held by concurrent claims). */
  more: boolean;
  /** The queue has a concurrency limit (claimJobs then claims under the queue's lock). */
  limited: boolean;
  /** The queue is paused (so `jobs` is empty). */
  paused: boolean;
}

/**
 * A ready job that may be handed out now: due, and — in an ordered group — first in line: no job of
 * its group is leased, and none ready (due or not: a retry's backoff holds its group) comes before
 * it. Read in the statement's snapshot; a job of the group committed later only waits longer.
 */
const headOfGroup = (x: string) => `
  (${x}.group_key is null or not exists (
     select 1 from commitfeed.jobs y
     where y.queue = ${x}.queue and y.group_key = ${x}.group_key and y.state in ('ready', 'leased')
       and (y.state = 'leased' or y.id < ${x}.id)))`;

/**
 * Claims up to `max` ready, due jobs of `queue` (priority, then age; an ordered group's next job
 * only), each with a fresh lease token, in one statement. `FOR UPDATE SKIP LOCKED`: concurrent
 * claimers never wait on each other and never get the same job. The same statement releases the
 * queue's expired leases (crash recovery: a job whose worker vanished is claimable again once its
 * lease runs out, and its attempt counts; out of attempts, it is dead-lettered with `lease expired`
 * as its last error). A paused queue hands out nothing.
 *
 * A queue with a concurrency limit hands out at most `limit - live leases` jobs. Counting and taking
 * must not interleave with another claim of the queue, so those claims run one at a time: a
 * transaction-scoped advisory lock on the queue, then the claim in a snapshot taken after it. The
 * lock is only taken once a claim has seen that the queue is limited (`limited` in the result).
 */
export async function claimJobs(
  db: Db,
  queue: string,
  max: number,
  leaseSeconds: number,
  locked = false,
): Promise<ClaimResult> {
  if (locked) {
    return inTransaction(db, async (trx) => {
      await sql`select pg_advisory_xact_lock(hashtextextended(${`commitfeed.claim:${queue}`}, 0))`.execute(
        trx,
      );
      return claimStatement(trx, queue, max, leaseSeconds, true);
    });
  }
  const res = await claimStatement(db, queue, max, leaseSeconds, false);
  if (!res.limited) return res;
  const again = await claimJobs(db, queue, max, leaseSeconds, true);
  return { ...again, reaped: again.reaped + res.reaped, reapedDead: again.reapedDead + res.reapedDead };
}

/**
 * The claim statement, unlocked and locked ($1 queue, $2 max, $3 lease seconds). Fixed texts, run as
 * named prepared statements: planning this statement afresh cost more PostgreSQL CPU than running it
 * (measured per claim of 10: ~1.7 → ~0.8 ms of backend CPU; bench/HISTORY.md "Queue hot path").
 */
const claimSql = (locked: boolean) =>
  prepared(`
    with reaped as (
      update commitfeed.jobs j
      set state = case when j.attempt >= j.max_attempts then 'dead' else 'ready' end,
          dead_at = case when j.attempt >= j.max_attempts then clock_timestamp() end,
          lease_expires_at = null,
          last_error = 'lease expired'
      where j.id in (select x.id from commitfeed.jobs x
                     -- statement_timestamp(), not clock_timestamp(): a stable value bounds the index
                     -- range (a volatile one is a filter over every lease of the queue); a lease
                     -- that expires during the statement is released by the next claim.
                     where x.queue = $1 and x.state = 'leased' and x.lease_expires_at <= statement_timestamp()
                     for update skip locked)
      returning j.state
    ), cfg as (
      select coalesce(bool_or(q.paused), false) as paused, min(q.concurrency) as concurrency
      from commitfeed.queues q where q.name = $1
    ), room as (
      -- Unlocked, a limited queue hands out nothing: the caller takes the lock and asks again.
      select case when cfg.paused then 0
                  when cfg.concurrency is null then $2::int4
                  ${
                    locked
                      ? `else greatest(0, least($2::int4, cfg.concurrency - (
                    select count(*) from commitfeed.jobs x
                    where x.queue = $1 and x.state = 'leased' and x.lease_expires_at > clock_timestamp())))`
                      : 'else 0'
                  }
             end as n,
             cfg.concurrency is not null as limited
      from cfg
    ), picked as (
      select x.id from commitfeed.jobs x
      where x.queue = $1 and x.state = 'ready' and x.run_at <= clock_timestamp()
        and ${headOfGroup('x')}
      order by x.priority, x.run_at, x.id
      limit (select n from room)
      for update skip locked
    ), claimed as (
      update commitfeed.jobs j
      set state = 'leased', attempt = j.attempt + 1, lease = gen_random_uuid(),
          lease_expires_at = clock_timestamp() + make_interval(secs => $3::float8)
      -- By primary key: a generic plan does not know the LIMIT above and joined picked by a hash
      -- over the whole table (a sequential scan per claim).
      where j.id = any(array(select picked.id from picked))
      returning j.id, j.payload, j.attempt, j.max_attempts, j.lease, j.lease_expires_at, j.priority, j.run_at
    )
    select c.id::text as id, c.payload::text as payload, c.attempt, c.max_attempts, c.lease::text as lease,
           extract(epoch from c.lease_expires_at)::float8 * 1000 as expires_ms,
           (select count(*) from reaped)::int4 as reaped,
           (select count(*) from reaped where reaped.state = 'dead')::int4 as reaped_dead,
           -- The snapshot still shows the claimed rows as ready: one ready and not picked is more.
           -- (A count up to max + 1 was a sequential scan in the generic plan, whose LIMIT is unknown;
           -- ordered as the claim index is, with a fixed LIMIT, this reads that index.)
           (select x.id from commitfeed.jobs x
            where x.queue = $1 and x.state = 'ready' and x.run_at <= clock_timestamp()
              and x.id <> all(array(select picked.id from picked))
            order by x.priority, x.run_at, x.id limit 1) is not null as more,
           (select limited from room) as limited,
           (select paused from cfg) as paused
    from (select 1) one left join claimed c on true
    order by c.priority, c.run_at, c.id`);
const CLAIM_SQL = claimSql(false);
const CLAIM_LOCKED_SQL = claimSql(true);

async function claimStatement(
  db: Db,
  queue: string,
  max: number,
  leaseSeconds: number,
  locked: boolean,
): Promise<ClaimResult> {
  const { rows } = await db.executeQuery<{
    id: string | null;
    payload: string;
    attempt: number;
    max_attempts: number;
    lease: string;
    expires_ms: number;
    reaped: number;
    reaped_dead: number;
    more: boolean;
    limited: boolean;
    paused: boolean;
  }>(CompiledQuery.raw(locked ? CLAIM_LOCKED_SQL : CLAIM_SQL, [queue, max, leaseSeconds]));
  return {
    paused: rows[0].paused,
    reaped: rows[0].reaped,
    reapedDead: rows[0].reaped_dead,
    more: rows[0].more,
    // Only an unlocked statement reports it: it means "take the lock and claim again".
    limited: rows[0].limited && !locked,
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

const NEXT_DUE_SQL = prepared(`
    with cfg as (
      select coalesce(bool_or(q.paused), false) as paused, min(q.concurrency) as concurrency
      from commitfeed.queues q where q.name = $1
    )
    select cfg.paused,
           exists (select 1 from commitfeed.jobs x
                   where x.queue = $1 and x.state = 'ready' and x.run_at <= clock_timestamp()
                     and ${headOfGroup('x')})
             and (cfg.concurrency is null or cfg.concurrency > (
                   select count(*) from commitfeed.jobs x
                   where x.queue = $1 and x.state = 'leased' and x.lease_expires_at > clock_timestamp())) as now,
           extract(epoch from least(
             -- Stable, so it bounds the index range: with clock_timestamp() this walked every
             -- ready job already due (3 ms beside 20,000 of them) to find the first one not due.
             (select min(x.run_at) from commitfeed.jobs x
              where x.queue = $1 and x.state = 'ready' and x.run_at > statement_timestamp()),
             (select min(x.lease_expires_at) from commitfeed.jobs x where x.queue = $1 and x.state = 'leased')
           ))::float8 * 1000 as due
    from cfg`);

/**
 * When `queue` next has something to hand out without a wake-up row: the earliest delayed job coming
 * due or lease expiring (epoch ms), `0` when jobs are claimable already (held by a concurrent claim,
 * or committed after a claim's snapshot: try again), or null when nothing is pending or the queue is
 * paused (an enqueue or a resume wakes claimers through the feed). Jobs behind the head of their
 * group, and a queue at its concurrency limit, wait for an ack (its `released` row) or a lease expiry.
 */
export async function nextDue(db: Db, queue: string): Promise<number | null> {
  const { rows } = await db.executeQuery<{ due: number | null; now: boolean; paused: boolean }>(
    CompiledQuery.raw(NEXT_DUE_SQL, [queue]),
  );
  const r = rows[0];
  if (r.paused) return null;
  if (r.now) return 0;
  return r.due;
}
