-- commitfeed.enqueue_jobs_unchecked: commitfeed.enqueue_jobs without its input checks (queue rows, key
-- dedup, job insert, wake-up), for a caller that applied the same rules already: the service's group
-- commit, whose every job passed src/queues/validate.ts (toJobInput), and commitfeed.enqueue_jobs
-- after its own checks. The checks were most of a one-job call's work (pgbench, one job per call:
-- see bench/RESULTS.md "Queue enqueue path"). Anything else calls commitfeed.enqueue_jobs: invalid
-- input here is stored, not refused. Same arguments and result as commitfeed.enqueue_jobs.
create or replace function commitfeed.enqueue_jobs_unchecked(queues text[], payloads json[], priorities integer[],
  delays double precision[], run_ats timestamptz[], keys text[], attempt_limits integer[], backoffs jsonb[],
  groups text[] default null)
returns table (id bigint, duplicate boolean)
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
  got_i bigint[];
  got_id bigint[];
  got_dup boolean[];
  left_i bigint[];
  done_i bigint[] := '{}';
  done_id bigint[] := '{}';
  done_dup boolean[] := '{}';
  wake_streams text[];
  wake_datas json[];
  round int := 0;
begin
  if n = 0 then
    return;
  end if;
  groups := coalesce(groups, array_fill(null::text, array[n]));

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
      from unnest(queues, payloads, priorities, delays, run_ats, keys, attempt_limits, backoffs, groups)
        with ordinality as s(queue, payload, priority, delay, run_at, key, attempt_limit, backoff, grp, i)
      where pending[s.i::int]
    ), a as materialized (
      -- Ids are taken here, in input order, so each input is matched to its row by id (RETURNING
      -- order is not guaranteed); a key already taken only skips a sequence value.
      select s.*, nextval('commitfeed.jobs_id_seq'::regclass) as id from s order by s.i
    ), ins as (
      insert into commitfeed.jobs (id, queue, payload, priority, run_at, key, max_attempts, backoff, group_key)
      overriding system value
      select a.id, a.queue, a.payload, a.priority,
             -- Milliseconds, as a JavaScript Date holds it.
             coalesce(date_trunc('milliseconds', a.run_at),
                      clock_timestamp() + make_interval(secs => a.delay)),
             a.key, a.attempt_limit, a.backoff, a.grp
      from a
      order by a.i
      on conflict (queue, key) where key is not null and state in ('ready', 'leased', 'dead') do nothing
      returning id
    )
    select array(select a.i from a order by a.i), array(select a.id from a order by a.i),
           array(select a.id in (select ins.id from ins) from a order by a.i)
    into round_i, round_id, round_new;

    -- A key that was taken: report the job holding it. This statement has a fresh snapshot, so it
    -- sees a conflicting job that a concurrent transaction just committed; if that job was acked
    -- (deleted) meanwhile, the key is free again and the next round inserts.
    select array_agg(r.i order by r.i) filter (where r.id is not null),
           array_agg(r.id order by r.i) filter (where r.id is not null),
           array_agg(not r.new order by r.i) filter (where r.id is not null),
           array_agg(r.i order by r.i) filter (where r.id is null)
    into got_i, got_id, got_dup, left_i
    from (select x.i, x.new,
                 case when x.new then x.id
                      else (select j.id from commitfeed.jobs j
                            where j.queue = queues[x.i::int] and j.key = keys[x.i::int]
                              and j.state in ('ready', 'leased', 'dead')) end as id
          from unnest(round_i, round_id, round_new) as x(i, id, new)) r;
    done_i := done_i || coalesce(got_i, '{}');
    done_id := done_id || coalesce(got_id, '{}');
    done_dup := done_dup || coalesce(got_dup, '{}');
    exit when left_i is null;
    round := round + 1;
    if round = 5 then
      raise exception 'commitfeed.enqueue_jobs: key dedup did not settle after 5 rounds';
    end if;
    pending := array(select g.i = any(left_i) from generate_series(1, n) as g(i));
  end loop;

  -- One wake-up per queue that got jobs, in the order of each queue's first new job.
  select array_agg('queue/' || w.queue order by w.first),
         array_agg(format('{"jobs":%s}', w.jobs)::json order by w.first)
  into wake_streams, wake_datas
  from (select q.queue, count(*) as jobs, min(q.i) as first
        from unnest(done_i, done_dup) as d(i, dup)
        join unnest(queues) with ordinality as q(queue, i) on q.i = d.i
        where not d.dup
        group by q.queue) w;
  if wake_streams is not null then
    perform commitfeed.append_unchecked(wake_streams, array_fill('enqueued'::text, array[cardinality(wake_streams)]),
                              array_fill(null::text, array[cardinality(wake_streams)]), wake_datas);
  end if;

  return query
    select d.id, d.dup or f.first <> f.i
    from unnest(firsts) with ordinality as f(first, i)
    join unnest(done_i, done_id, done_dup) as d(i, id, dup) on d.i = f.first
    order by f.i;
end
$fn$;

comment on function commitfeed.enqueue_jobs_unchecked(text[], json[], integer[], double precision[], timestamptz[], text[], integer[], jsonb[], text[]) is
  'commitfeed.enqueue_jobs without its input checks, for callers that applied the same rules already (the service''s group commit). Invalid input is stored, not refused: call commitfeed.enqueue_jobs.';
