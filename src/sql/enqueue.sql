-- commitfeed.enqueue: enqueue one job inside the application's own transaction (the transactional
-- outbox for queues), as commitfeed.publish does for events. Its arguments are a job's fields with
-- the HTTP API's defaults; the backoff is normalised here as toJobInput (src/queues/validate.ts) does
-- (unknown properties dropped, defaults filled in), then commitfeed.enqueue_jobs does the rest. One
-- difference from the HTTP API: the payload is jsonb (like publish's data), so it is stored as
-- jsonb's text.
create or replace function commitfeed.enqueue(queue text, payload jsonb, delay_seconds double precision default 0,
  priority integer default 0, key text default null, max_attempts integer default 5,
  run_at timestamptz default null, backoff jsonb default null, group_key text default null)
returns bigint
language plpgsql
as $fn$
declare
  max_seconds constant float8 := 31536000;
  b jsonb := coalesce(backoff, '{}'::jsonb);
  norm jsonb;
  v jsonb;
begin
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

  return (select e.id
          from commitfeed.enqueue_jobs(array[queue], array[payload::json], array[coalesce(priority, 0)],
                                       array[delay_seconds], array[run_at], array[key],
                                       array[coalesce(max_attempts, 5)], array[norm], array[group_key]) e);
end
$fn$;

comment on function commitfeed.enqueue(text, jsonb, double precision, integer, text, integer, timestamptz, jsonb, text) is
  'Enqueues one job (inside the caller''s transaction: claimable and waiting claimers woken at COMMIT, discarded on ROLLBACK) and returns its id. With a key already held by a job of the queue not yet completed, enqueues nothing and returns that job''s id.';
