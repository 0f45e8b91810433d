-- commitfeed.enqueue: enqueue one job inside the application's own transaction (the transactional
-- outbox for queues), as commitfeed.publish does for events. The same rows as the service's
-- enqueueJobs (src/queues/enqueue.ts) with toJobInput's rules (src/queues/validate.ts): the queue row
-- if missing, the job (key dedup against the queue's jobs not yet completed: the existing id is
-- returned and nothing is written), then one wake-up row through commitfeed.append (stream
-- 'queue/<name>', type 'enqueued', data {"jobs":1}), whose notify is delivered at the caller's COMMIT.
-- One difference: the payload is jsonb (like publish's data), so it is stored as jsonb's text.
create or replace function commitfeed.enqueue(queue text, payload jsonb, delay_seconds double precision default 0,
  priority integer default 0, key text default null, max_attempts integer default 5,
  run_at timestamptz default null, backoff jsonb default null)
returns bigint
language plpgsql
as $fn$
-- The parameters are named like the columns: in SQL statements, a bare name is the column
-- (ON CONFLICT (queue, key)); parameters are used where no table is in scope, or qualified.
#variable_conflict use_column
declare
  max_seconds constant float8 := 31536000;
  b jsonb := coalesce(backoff, '{}'::jsonb);
  norm jsonb;
  v jsonb;
  job bigint;
  round int := 0;
begin
  if queue is null or char_length(queue) not between 1 and 200 or queue ~ '[^A-Za-z0-9._:-]' then
    raise exception using errcode = '22023', message = format(
      'queue name must be 1-200 characters of letters, digits and . _ : - (got %s)',
      coalesce(to_json(left(queue, 80))::text, 'null'));
  end if;
  if payload is null then
    raise exception using errcode = '22023',
      message = 'payload must not be SQL NULL (use ''null''::jsonb for a JSON null)';
  end if;
  -- NaN compares greater than every number: "not between" refuses it, and the infinities.
  if delay_seconds is null or not (delay_seconds between 0 and max_seconds) then
    raise exception using errcode = '22023',
      message = format('delay_seconds must be a number of seconds from 0 to %s', max_seconds);
  end if;
  if run_at is not null then
    if not isfinite(run_at) then
      raise exception using errcode = '22023', message = 'run_at must be a finite timestamp';
    end if;
    if delay_seconds <> 0 then
      raise exception using errcode = '22023', message = 'give either delay_seconds or run_at, not both';
    end if;
  end if;
  if priority is not null and priority not between -1000000 and 1000000 then
    raise exception using errcode = '22023',
      message = 'priority must be an integer from -1000000 to 1000000';
  end if;
  -- Lengths in characters (code points), as the TypeScript rule (src/feed/validate.ts) counts them.
  if char_length(key) not between 1 and 200 then
    raise exception using errcode = '22023',
      message = 'key must be a string of 1-200 characters (no NUL, well-formed Unicode)';
  end if;
  if max_attempts is not null and max_attempts not between 1 and 1000 then
    raise exception using errcode = '22023', message = 'max_attempts must be an integer from 1 to 1000';
  end if;

  -- The backoff, normalised as toJobInput does (unknown properties dropped, defaults filled in).
  if jsonb_typeof(b) = 'null' then
    b := '{}'::jsonb;
  end if;
  if jsonb_typeof(b) <> 'object' then
    raise exception using errcode = '22023', message = 'backoff must be an object';
  end if;
  if b ? 'type' and b->'type' not in ('"exponential"'::jsonb, '"fixed"'::jsonb) then
    raise exception using errcode = '22023', message = 'backoff.type must be "exponential" or "fixed"';
  end if;
  if b ? 'jitter' and jsonb_typeof(b->'jitter') <> 'boolean' then
    raise exception using errcode = '22023', message = 'backoff.jitter must be a boolean';
  end if;
  norm := jsonb_build_object('type', coalesce(b->'type', '"exponential"'),
    'delay', '1'::jsonb, 'max', '3600'::jsonb, 'jitter', coalesce(b->'jitter', 'true'));
  foreach v in array array['"delay"'::jsonb, '"max"'::jsonb] loop
    if b ? (v #>> '{}') then
      if jsonb_typeof(b->(v #>> '{}')) <> 'number'
         or (b->>(v #>> '{}'))::numeric not between 0 and max_seconds::numeric then
        raise exception using errcode = '22023', message = format(
          'backoff.%s must be a number of seconds from 0 to %s', v #>> '{}', max_seconds);
      end if;
      -- Through float8, so 1.0 is stored as 1, as JSON.stringify writes it.
      norm := norm || jsonb_build_object(v #>> '{}', to_jsonb((b->>(v #>> '{}'))::float8));
    end if;
  end loop;

  insert into commitfeed.queues (name) values (queue) on conflict do nothing;
  loop
    insert into commitfeed.jobs (queue, payload, priority, run_at, key, max_attempts, backoff)
    values (queue, payload::json, coalesce(priority, 0),
            -- Milliseconds, as a JavaScript Date holds it.
            coalesce(date_trunc('milliseconds', run_at),
                     clock_timestamp() + make_interval(secs => delay_seconds)),
            key, coalesce(max_attempts, 5), norm)
    on conflict (queue, key) where key is not null do nothing
    returning id into job;
    if job is not null then
      perform commitfeed.append(array['queue/' || queue], array['enqueued'], array[null::text],
                                array['{"jobs":1}'::json]);
      return job;
    end if;
    -- The key is taken: return that job. This statement has a fresh snapshot, so it sees a
    -- conflicting row that a concurrent transaction just committed; if that job was acked
    -- (deleted) meanwhile, the key is free again and the next round inserts.
    select j.id into job from commitfeed.jobs j where j.queue = enqueue.queue and j.key = enqueue.key;
    if job is not null then
      return job;
    end if;
    round := round + 1;
    if round = 5 then
      raise exception 'commitfeed.enqueue: key dedup did not settle after 5 rounds';
    end if;
  end loop;
end
$fn$;

comment on function commitfeed.enqueue(text, jsonb, double precision, integer, text, integer, timestamptz, jsonb) is
  'Enqueues one job (inside the caller''s transaction: claimable and waiting claimers woken at COMMIT, discarded on ROLLBACK) and returns its id. With a key already held by a job of the queue not yet completed, enqueues nothing and returns that job''s id.';
