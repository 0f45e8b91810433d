-- The job payload of one event: data last, as written (json keeps its text), so a consumer may
-- forward the event's data byte for byte (src/webhooks/ does). `suffix`: commitfeed.cursor_suffix(),
-- taken once by the caller, so that the event's cursor has the form of every other answer's.
-- Its first form (without the suffix) wrote untagged cursors; a call of it now fails rather than do so.
drop function if exists commitfeed.follow_payload(text, text, text, text, xid8, bigint, timestamptz, json);
create or replace function commitfeed.follow_payload(sub_name text, stream text, type text, key text,
  txid xid8, id bigint, suffix text, created_at timestamptz, data json)
returns json
language sql stable
as $fn$
  select json_build_object('subscription', sub_name, 'stream', stream, 'type', type, 'key', key,
                           'cursor', txid::text || '-' || id::text || suffix,
                           'time', to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                           'data', data)
$fn$;

-- commitfeed.follow_subscription: one follow step of a stream subscription (src/flows/follower.ts).
-- Reads the next page of the stream subscription's stream (or, with a pattern, of the whole feed) after its cursor — from finished
-- transactions only, ordered by (txid, id), the feed's gap-free rule (`id > cursor` alone would skip
-- an event whose transaction took a lower id but committed later) — enqueues one job per event that
-- matches the stream pattern and type filter (in the stream subscription's ordered group, if it has
-- one), and advances the cursor past the page, all in the caller's transaction:
-- the jobs and the cursor commit together or not at all, so every event becomes exactly one job
-- however many replicas run the follower and wherever one of them crashes.
--
-- The stream subscription's row is locked FOR UPDATE SKIP LOCKED: a replica finding it held by another
-- returns no row and moves on (the holder is doing the work). A paused or unknown stream subscription
-- returns no row.
-- Returns the jobs enqueued and the events read (read = page: more may follow at once).
create or replace function commitfeed.follow_subscription(sub_name text, page integer)
returns table (jobs integer, read integer)
language plpgsql
as $fn$
#variable_conflict use_column
declare
  s commitfeed.subscriptions%rowtype;
  payloads json[];
  n_read int;
  last_txid xid8;
  last_id bigint;
  n int;
  suffix text;
begin
  -- The feed first, then the stream subscription's row: the janitor takes them in the same order (it
  -- locks the feed to drop a partition, then counts the stream subscription's lost events), so neither
  -- waits for the other in a cycle.
  lock table commitfeed.feed in access share mode;
  select * into s from commitfeed.subscriptions x
  where x.name = sub_name and not x.paused
  for update skip locked;
  if not found then
    return;
  end if;
  suffix := commitfeed.cursor_suffix();

  -- The horizon comes from this statement's snapshot, so a row behind it cannot commit unseen. Every
  -- event of the page moves the cursor; only those of the wanted types become jobs. A stream
  -- subscription of one stream reads that stream's index; one with a pattern pages through the whole
  -- feed (so its cursor moves past the events of other streams too, and a step never re-reads them).
  if s.pattern is null then
    select count(*)::int,
           (array_agg(p.txid order by p.txid desc, p.id desc))[1],
           (array_agg(p.id order by p.txid desc, p.id desc))[1],
           array_agg(commitfeed.follow_payload(s.name, p.stream, p.type, p.key, p.txid, p.id, suffix, p.created_at, p.data)
                     order by p.txid, p.id) filter (where s.type is null or p.type = s.type)
    into n_read, last_txid, last_id, payloads
    from (
      select f.txid, f.id, f.stream, f.type, f.key, f.data, f.created_at
      from commitfeed.feed f
      where f.stream = s.stream
        and (f.txid, f.id) > (s.cursor_txid, s.cursor_id)
        and f.txid < pg_snapshot_xmin(pg_current_snapshot())
      order by f.txid, f.id
      limit page
    ) p;
  else
    select count(*)::int,
           (array_agg(p.txid order by p.txid desc, p.id desc))[1],
           (array_agg(p.id order by p.txid desc, p.id desc))[1],
           array_agg(commitfeed.follow_payload(s.name, p.stream, p.type, p.key, p.txid, p.id, suffix, p.created_at, p.data)
                     order by p.txid, p.id)
             filter (where p.stream ~ s.pattern and (s.types is null or p.type = any (s.types)))
    into n_read, last_txid, last_id, payloads
    from (
      select f.txid, f.id, f.stream, f.type, f.key, f.data, f.created_at
      from commitfeed.feed f
      where (f.txid, f.id) > (s.cursor_txid, s.cursor_id)
        and f.txid < pg_snapshot_xmin(pg_current_snapshot())
      order by f.txid, f.id
      limit page
    ) p;
  end if;

  if n_read = 0 then
    return query select 0, 0;
    return;
  end if;
  n := coalesce(cardinality(payloads), 0);
  if n > 0 then
    -- Ids in input order, so job order is the stream's commit order.
    perform commitfeed.enqueue_jobs(array_fill(s.queue, array[n]), payloads,
      array_fill(s.priority, array[n]), array_fill(0::float8, array[n]),
      array_fill(null::timestamptz, array[n]), array_fill(null::text, array[n]),
      array_fill(s.max_attempts, array[n]), array_fill(s.backoff, array[n]), array_fill(s.group_key, array[n]));
  end if;
  update commitfeed.subscriptions x
  set cursor_txid = last_txid, cursor_id = last_id, jobs = x.jobs + n,
      followed_at = case when n > 0 then clock_timestamp() else x.followed_at end
  where x.name = sub_name;
  return query select n, n_read;
end
$fn$;
