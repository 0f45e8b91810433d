-- commitfeed.append: the one implementation of appending events (validation, key dedup, insert,
-- notify). The service's batcher, the HTTP transaction endpoint, the library API, commitfeed.publish
-- and commitfeed.enqueue_jobs (a queue's wake-up row) all call it.
--
-- Set-based: one call appends a whole batch. Returns one row per input, in input order: the event's
-- cursor and whether it was a duplicate (its key already taken in the stream within the dedup window,
-- or repeated earlier in the same call: the original event's cursor is returned and nothing is
-- appended). The notify is delivered at the caller's COMMIT and dropped with its ROLLBACK; calls that
-- add nothing (all duplicates) do not notify.
create or replace function commitfeed.append(streams text[], types text[], keys text[], datas json[])
returns table (cursor text, duplicate boolean)
language plpgsql
as $fn$
declare
  n int := coalesce(cardinality(streams), 0);
  pre bigint[];      -- per input: the id it was given (a repeated key: its first copy's)
  repeat boolean[];  -- per input: its (stream, key) appeared earlier in the call
  inserted bigint[];
  tx text;
begin
  if n = 0 then
    return;
  end if;
  -- The rules of src/feed/validate.ts, restated (test/validation-parity.test.ts checks that both
  -- accept and refuse the same inputs). Lengths are in characters (code points). A stream is a
  -- name, or 'queue/' and a queue name (a queue's wake-up stream, written by commitfeed.enqueue_jobs).
  perform commitfeed.refuse_invalid('commitfeed.append', 'event',
    array[n, cardinality(types), cardinality(keys), cardinality(datas)],
    array(
      select coalesce(commitfeed.invalid_name('stream', nm.name, s.stream), case
        when s.data is null then 'data must not be SQL NULL (use ''null''::json for a JSON null)'
        -- Not '^[^...]{1,200}$': a bounded repeat is slow in PostgreSQL's regex engine.
        when char_length(s.type) not between 1 and 200 or s.type ~ '[\x01-\x1f\x7f]' then
          'type must be 1-200 characters without control characters'
        when char_length(s.key) not between 1 and 200 then 'key must be 1-200 characters'
      end)
      from unnest(streams, types, keys, datas) with ordinality as s(stream, type, key, data, i),
           lateral (select case when left(s.stream, 6) = 'queue/' then substr(s.stream, 7)
                                else s.stream end as name) nm
      order by s.i));

  if cardinality(array_remove(keys, null)) = 0 then
    -- No keys (the common case): nothing can be a duplicate. Identity values are taken row by row
    -- as the insert reads unnest's output, so ascending ids are input order.
    with ins as (
      insert into commitfeed.feed (stream, type, key, data)
      select * from unnest(streams, types, keys, datas)
      returning id
    )
    select array(select ins.id from ins order by ins.id) into inserted;
    perform pg_notify('commitfeed_feed', '');
    tx := pg_current_xact_id()::text;
    return query select tx || '-' || x.id::text, false from unnest(inserted) as x(id);
    return;
  end if;

  -- With keys: ids are taken here, in input order, so each input is matched to its row by id
  -- (RETURNING order is not guaranteed); a key already taken only skips a sequence value.
  with u as (
    select s.i, s.stream, s.type, s.key, s.data,
           case when s.key is null then s.i
                else min(s.i) over (partition by s.stream, s.key) end as first
    from unnest(streams, types, keys, datas) with ordinality as s(stream, type, key, data, i)
  ), a as materialized (
    select u.i, nextval('commitfeed.feed_id_seq'::regclass) as id, u.stream, u.type, u.key, u.data
    from u where u.first = u.i
    order by u.i
  ), k as (
    -- The key claims its slot first: commitfeed.feed is partitioned and cannot hold a unique
    -- (stream, key) index, so feed_keys does. ON CONFLICT waits for a concurrent claim of the
    -- same key and skips it if that commits. Sorted, so two batches claim keys in one order.
    insert into commitfeed.feed_keys (stream, key, txid, id)
    select a.stream, a.key, pg_current_xact_id(), a.id from a
    where a.key is not null
    order by a.stream, a.key
    on conflict (stream, key) do nothing
    returning id
  ), ins as (
    insert into commitfeed.feed (id, stream, type, key, data)
    select a.id, a.stream, a.type, a.key, a.data from a
    where a.key is null or a.id in (select k.id from k)
    returning id
  )
  select array(select a.id from u join a on a.i = u.first order by u.i),
         array(select u.first <> u.i from u order by u.i),
         array(select ins.id from ins)
  into pre, repeat, inserted;

  if cardinality(inserted) > 0 then
    perform pg_notify('commitfeed_feed', '');
    tx := pg_current_xact_id()::text;
  end if;
  if cardinality(inserted) = cardinality(pre) - (select count(*) from unnest(repeat) r where r) then
    -- Everything new was appended (the common case).
    return query select tx || '-' || p.id::text, p.r from unnest(pre, repeat) as p(id, r);
    return;
  end if;
  -- Some keys were already taken in their stream (within the dedup window): report the original
  -- events. This statement has a fresh snapshot, so it sees a conflicting row that a concurrent
  -- transaction just committed.
  return query
    select case when i.id is not null then tx || '-' || p.id::text
                else (select fk.txid::text || '-' || fk.id::text from commitfeed.feed_keys fk
                      where fk.stream = streams[p.i] and fk.key = keys[p.i]) end,
           p.r or i.id is null
    from unnest(pre, repeat) with ordinality as p(id, r, i)
    left join unnest(inserted) as i(id) on i.id = p.id
    order by p.i;
end
$fn$;
