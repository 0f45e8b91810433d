-- commitfeed.enqueue_jobs_unchecked: commitfeed.enqueue_jobs without its input checks (queue rows, key
-- dedup, job insert, wake-up), for a caller that applied the same rules already: the service's group
-- commit, whose every job passed src/queues/validate.ts (toJobInput), and commitfeed.enqueue_jobs
-- after its own checks. The checks were most of a one-job call's work (pgbench, one job per call:
-- see bench/HISTORY.md "Queue hot path"). Anything else calls commitfeed.enqueue_jobs: invalid
-- input here is stored, not refused. The arguments and the first two result columns are
-- commitfeed.enqueue_jobs's.
--
-- Hand-off: `leases` (optional) gives, per job, the lease in seconds of a claim waiting for it in the
-- calling process, or NULL. Such a job is inserted already leased (attempt 1, a fresh lease token)
-- when its queue is not paused and has no concurrency limit, and is returned with `lease` and
-- `lease_expires_ms` (epoch ms); the caller hands it to the waiting claim after COMMIT instead of
-- waking it to run a claim statement. The caller only asks for jobs due now outside ordered groups.
-- Handed-off jobs wake nobody: the wake-up row counts only the jobs left ready, and a call that
-- hands off all its jobs writes no row and sends no notify.
-- Its first form (without leases) would make calls ambiguous.
drop function if exists commitfeed.enqueue_jobs_unchecked(text[], json[], integer[], double precision[], timestamptz[],
  text[], integer[], jsonb[], text[]);
create or replace function commitfeed.enqueue_jobs_unchecked(queues text[], payloads json[], priorities integer[],
  delays double precision[], run_ats timestamptz[], keys text[], attempt_limits integer[], backoffs jsonb[],
  groups text[] default null, leases double precision[] default null)
returns table (id bigint, duplicate boolean, lease uuid, lease_expires_ms double precision)
language plpgsql
-- Every statement below takes arrays whose sizes the planner cannot know, so a custom plan is never
-- better than the generic one, yet PL/pgSQL kept choosing custom plans: planning each statement on
-- every call was 80% of a one-job call (1.1 → 0.2 ms of backend time per call, measured in a loop).
set plan_cache_mode = force_generic_plan
as $fn$
-- The result columns (id, duplicate) are variables too: in statements, a bare name is the column.
#variable_conflict use_column
declare
  n int := coalesce(cardinality(queues), 0);
  firsts bigint[];    -- per input: the first input with its (queue, key); itself when it has no key
  pending boolean[];  -- per input: still to insert (a first copy whose outcome is not settled)
  round_i bigint[];
  round_id bigint[];
  round_new boolean[];
  round_lease uuid[];
  round_exp float8[];
  got_i bigint[];
  got_id bigint[];
  got_dup boolean[];
  got_lease uuid[];
  got_exp float8[];
  left_i bigint[];
  done_i bigint[] := '{}';
  done_id bigint[] := '{}';
  done_dup boolean[] := '{}';
  -- Per settled input: the lease of a job this call inserted leased (handed off), else null.
  done_lease uuid[] := '{}';
  done_exp float8[] := '{}';
  wake_streams text[];
  wake_datas json[];
  round int := 0;
begin
  if n = 0 then
    return;
  end if;
  groups := coalesce(groups, array_fill(null::text, array[n]));
  leases := coalesce(leases, array_fill(null::float8, array[n]));

  -- Sorted, so concurrent calls lock new queue names in one order.
  insert into commitfeed.queues (name)
  select distinct q.name from unnest(queues) as q(name) order by q.name
  on conflict do nothing;

  if cardinality(array_remove(keys, null)) = 0 then
    -- No keys (the common case): every input is its own first copy.
    firsts := array(select g.i from generate_series(1, n) as g(i));
    pending := array_fill(true, array[n]);
  else
    select array_agg(f.first order by f.i), array_agg(f.first = f.i order by f.i) into firsts, pending
    from (select s.i, case when s.key is null then s.i
                           else min(s.i) over (partition by s.queue, s.key) end as first
          from unnest(queues, keys) with ordinality as s(queue, key, i)) f;
  end if;

  loop
    with s as (
      select s.*
      from unnest(queues, payloads, priorities, delays, run_ats, keys, attempt_limits, backoffs, groups, leases)
        with ordinality as s(queue, payload, priority, delay, run_at, key, attempt_limit, backoff, grp, lease_secs, i)
      where pending[s.i::int]
    ), a as materialized (
      -- Ids are taken here, in input order, so each input is matched to its row by id (RETURNING
      -- order is not guaranteed); a key already taken only skips a sequence value.
      select s.*, nextval('commitfeed.jobs_id_seq'::regclass) as id from s order by s.i
    ), ins as (
      insert into commitfeed.jobs (id, queue, payload, priority, run_at, key, max_attempts, backoff, group_key,
                                   state, attempt, lease, lease_expires_at)
      overriding system value
      select a.id, a.queue, a.payload, a.priority,
             -- Milliseconds, as a JavaScript Date holds it.
             coalesce(date_trunc('milliseconds', a.run_at),
                      clock_timestamp() + make_interval(secs => a.delay)),
             a.key, a.attempt_limit, a.backoff, a.grp,
             case when h.ok then 'leased' else 'ready' end,
             case when h.ok then 1 else 0 end,
             case when h.ok then gen_random_uuid() end,
             case when h.ok then clock_timestamp() + make_interval(secs => a.lease_secs) end
      from a
      -- Hand-off only where a claim statement would hand the job out now (the queue's row exists:
      -- inserted above).
      cross join lateral (
        select a.lease_secs is not null and not q.paused and q.concurrency is null as ok
        from commitfeed.queues q where q.name = a.queue) h
      order by a.i
      on conflict (queue, key) where key is not null and state in ('ready', 'leased', 'dead') do nothing
      -- The lease comes back with the row: nothing reads commitfeed.jobs again for it (a generic
      -- plan made while the table was small would scan the whole table for it).
      returning id, lease, extract(epoch from lease_expires_at)::float8 * 1000 as exp
    )
    select array_agg(a.i order by a.i), array_agg(a.id order by a.i), array_agg(ins.id is not null order by a.i),
           array_agg(ins.lease order by a.i), array_agg(ins.exp order by a.i)
    into round_i, round_id, round_new, round_lease, round_exp
    from a left join ins on ins.id = a.id;

    -- A key that was taken: report the job holding it. This statement has a fresh snapshot, so it
    -- sees a conflicting job that a concurrent transaction just committed; if that job was acked
    -- (deleted) meanwhile, the key is free again and the next round inserts.
    select array_agg(r.i order by r.i) filter (where r.id is not null),
           array_agg(r.id order by r.i) filter (where r.id is not null),
           array_agg(not r.new order by r.i) filter (where r.id is not null),
           array_agg(r.lease order by r.i) filter (where r.id is not null),
           array_agg(r.exp order by r.i) filter (where r.id is not null),
           array_agg(r.i order by r.i) filter (where r.id is null)
    into got_i, got_id, got_dup, got_lease, got_exp, left_i
    from (select x.i, x.new, x.lease, x.exp,
                 case when x.new then x.id
                      else (select j.id from commitfeed.jobs j
                            where j.queue = queues[x.i::int] and j.key = keys[x.i::int]
                              and j.state in ('ready', 'leased', 'dead')) end as id
          from unnest(round_i, round_id, round_new, round_lease, round_exp) as x(i, id, new, lease, exp)) r;
    done_i := done_i || coalesce(got_i, '{}');
    done_id := done_id || coalesce(got_id, '{}');
    done_dup := done_dup || coalesce(got_dup, '{}');
    done_lease := done_lease || coalesce(got_lease, '{}');
    done_exp := done_exp || coalesce(got_exp, '{}');
    exit when left_i is null;
    round := round + 1;
    if round = 5 then
      raise exception 'commitfeed.enqueue_jobs: key dedup did not settle after 5 rounds';
    end if;
    pending := array(select g.i = any(left_i) from generate_series(1, n) as g(i));
  end loop;

  -- One wake-up per queue that got jobs left ready, in the order of each queue's first new job.
  select array_agg('queue/' || w.queue order by w.first),
         array_agg(format('{"jobs":%s}', w.jobs)::json order by w.first)
  into wake_streams, wake_datas
  from (select q.queue, count(*) as jobs, min(q.i) as first
        from unnest(done_i, done_dup, done_lease) as d(i, dup, lease)
        join unnest(queues) with ordinality as q(queue, i) on q.i = d.i
        where not d.dup and d.lease is null
        group by q.queue) w;
  if wake_streams is not null then
    perform commitfeed.append_unchecked(wake_streams, array_fill('enqueued'::text, array[cardinality(wake_streams)]),
                              array_fill(null::text, array[cardinality(wake_streams)]), wake_datas);
  end if;

  -- A handed-off job's lease goes to its own input only, never to a repeat of its key in the call.
  return query
    select d.id, d.dup or f.first <> f.i,
           case when f.first = f.i then d.lease end, case when f.first = f.i then d.exp end
    from unnest(firsts) with ordinality as f(first, i)
    join unnest(done_i, done_id, done_dup, done_lease, done_exp) as d(i, id, dup, lease, exp) on d.i = f.first
    order by f.i;
end
$fn$;

comment on function commitfeed.enqueue_jobs_unchecked(text[], json[], integer[], double precision[], timestamptz[], text[], integer[], jsonb[], text[], double precision[]) is
  'commitfeed.enqueue_jobs without its input checks, for callers that applied the same rules already (the service''s group commit), which may also hand jobs off to claims waiting for them (leases). Invalid input is stored, not refused: call commitfeed.enqueue_jobs.';
