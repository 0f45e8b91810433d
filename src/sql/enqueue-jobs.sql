-- commitfeed.enqueue_jobs: the one implementation of enqueueing (validation, queue rows, key dedup,
-- job insert, wake-up). The service's enqueueJobs (batcher, /v1/tx, library API) and
-- commitfeed.enqueue (one job, in an application's own transaction) both call it.
--
-- Set-based: one call enqueues a whole batch, the arrays holding one element per job. Returns one row
-- per input, in input order: the job's id and whether it was a duplicate (its key held by a job of
-- the queue not yet completed, or repeated earlier in the same call: that job's id is returned and
-- nothing is enqueued). Each queue that got jobs gets one wake-up row through commitfeed.append
-- (stream 'queue/<name>', type 'enqueued', data {"jobs":<n>}), whose notify is delivered at the
-- caller's COMMIT: waiting claimers wake exactly when the jobs become visible, never for a rollback.
-- The row is a bare wake marker (claimers read the jobs table), so it stays small whatever the payloads.
--
-- backoffs must be normalised objects ({"type","delay","max","jitter"}); run_ats win over delays,
-- and a job may not give both. groups (optional, null for none) puts jobs in ordered groups: a
-- group's jobs are handed out one at a time, in id order.
create or replace function commitfeed.enqueue_jobs(queues text[], payloads json[], priorities integer[],
  delays double precision[], run_ats timestamptz[], keys text[], attempt_limits integer[], backoffs jsonb[],
  groups text[] default null)
returns table (id bigint, duplicate boolean)
language plpgsql
as $fn$
-- The result columns (id, duplicate) are variables too: in statements, a bare name is the column.
#variable_conflict use_column
declare
  n int := coalesce(cardinality(queues), 0);
  max_seconds constant float8 := 31536000;
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
  -- The rules of src/queues/validate.ts, restated (test/validation-parity.test.ts checks that both
  -- accept and refuse the same inputs). Lengths are in characters (code points). Messages name the
  -- arguments of commitfeed.enqueue, the one-job form applications call.
  perform commitfeed.refuse_invalid('commitfeed.enqueue_jobs', 'job',
    array[n, cardinality(payloads), cardinality(priorities), cardinality(delays), cardinality(run_ats),
          cardinality(keys), cardinality(attempt_limits), cardinality(backoffs), cardinality(groups)],
    array(
      select coalesce(commitfeed.invalid_name('queue', s.queue, s.queue), case
        when s.payload is null then 'payload must not be SQL NULL (use ''null'' for a JSON null)'
        -- NaN compares greater than every number: "not between" refuses it, and the infinities.
        when s.delay is null or not (s.delay between 0 and max_seconds) then
          format('delay_seconds must be a number of seconds from 0 to %s', max_seconds)
        when not isfinite(s.run_at) then 'run_at must be a finite timestamp'
        when s.run_at is not null and s.delay <> 0 then 'give either delay_seconds or run_at, not both'
        when s.priority is null or s.priority not between -1000000 and 1000000 then
          'priority must be an integer from -1000000 to 1000000'
        when char_length(s.key) not between 1 and 200 then
          'key must be a string of 1-200 characters (no NUL, well-formed Unicode)'
        when s.attempt_limit is null or s.attempt_limit not between 1 and 1000 then
          'max_attempts must be an integer from 1 to 1000'
        when jsonb_typeof(s.backoff) is distinct from 'object' then 'backoff must be an object'
        when char_length(s.grp) not between 1 and 200 then
          'group must be a string of 1-200 characters (no NUL, well-formed Unicode)'
      end)
      from unnest(queues, payloads, priorities, delays, run_ats, keys, attempt_limits, backoffs, groups)
        with ordinality as s(queue, payload, priority, delay, run_at, key, attempt_limit, backoff, grp, i)
      order by s.i));

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
    perform commitfeed.append(wake_streams, array_fill('enqueued'::text, array[cardinality(wake_streams)]),
                              array_fill(null::text, array[cardinality(wake_streams)]), wake_datas);
  end if;

  return query
    select d.id, d.dup or f.first <> f.i
    from unnest(firsts) with ordinality as f(first, i)
    join unnest(done_i, done_id, done_dup) as d(i, id, dup) on d.i = f.first
    order by f.i;
end
$fn$;

comment on function commitfeed.enqueue_jobs(text[], json[], integer[], double precision[], timestamptz[], text[], integer[], jsonb[], text[]) is
  'Enqueues a batch of jobs (one array element per job; inside the caller''s transaction: claimable and waiting claimers woken at COMMIT, discarded on ROLLBACK). Returns one row per job, in order: its id, and whether its key was already held by a job of the queue not yet completed (then nothing was enqueued and the id is that job''s).';
