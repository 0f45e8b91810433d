-- commitfeed.enqueue_jobs: enqueueing, for every caller: checks the input, then hands it to
-- commitfeed.enqueue_jobs_unchecked (queue rows, key dedup, job insert, wake-up). commitfeed.enqueue
-- (one job, in an application's own transaction) and the library's enqueueJobs call it; the
-- service's group commit calls enqueue_jobs_unchecked, having checked every job in TypeScript.
--
-- Set-based: one call enqueues a whole batch, the arrays holding one element per job. Returns one row
-- per input, in input order: the job's id and whether it was a duplicate (its key held by a job of
-- the queue not yet completed, or repeated earlier in the same call: that job's id is returned and
-- nothing is enqueued). Each queue that got jobs gets one wake-up row through commitfeed.append_unchecked
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
declare
  n int := coalesce(cardinality(queues), 0);
  max_seconds constant float8 := 31536000;
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

  return query select u.id, u.duplicate
    from commitfeed.enqueue_jobs_unchecked(queues, payloads, priorities, delays, run_ats, keys, attempt_limits,
                                           backoffs, groups) u;
end
$fn$;

comment on function commitfeed.enqueue_jobs(text[], json[], integer[], double precision[], timestamptz[], text[], integer[], jsonb[], text[]) is
  'Enqueues a batch of jobs (one array element per job; inside the caller''s transaction: claimable and waiting claimers woken at COMMIT, discarded on ROLLBACK). Returns one row per job, in order: its id, and whether its key was already held by a job of the queue not yet completed (then nothing was enqueued and the id is that job''s).';
