-- commitfeed.append_unchecked: commitfeed.append without its input checks (key dedup, insert,
-- notify), for a caller that has applied the same rules already: the service's group commit, whose
-- every event passed src/feed/validate.ts. The checks were a quarter of append's work for a batch
-- of 1,000 events and a third for 16 (instructions counted under callgrind). Anything else calls
-- commitfeed.append: invalid input here is not refused with a message, it is stored (a stream name
-- or type with a line break would corrupt SSE frames), as with a direct insert into commitfeed.feed.
-- Same arguments and result as commitfeed.append.
create or replace function commitfeed.append_unchecked(streams text[], types text[], keys text[], datas json[])
returns table (cursor text, duplicate boolean)
language plpgsql
as $fn$
declare
  pre bigint[];      -- per input: the id it was given (a repeated key: its first copy's)
  repeat boolean[];  -- per input: its (stream, key) appeared earlier in the call
  inserted bigint[];
  tx text;
begin
  if coalesce(cardinality(streams), 0) = 0 then
    return;
  end if;
  if cardinality(array_remove(keys, null)) = 0 then
    -- No keys (the common case): nothing can be a duplicate (see append-plain.sql).
    return query
      select p.tx || '-' || x.id, false
      from commitfeed.append_plain(streams, types, datas) p,
           unnest(string_to_array(p.ids, ',')) with ordinality as x(id, i)
      order by x.i;
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
    perform commitfeed.notify_feed();
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
