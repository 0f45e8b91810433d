-- commitfeed.mercure_append: the one implementation of storing Mercure updates (validation, ids,
-- the feed row, the topic index rows, the notify). HTTP publishes call it once per group commit;
-- commitfeed.mercure_publish (an application's own transaction), the library function and the
-- /v1/tx op call it with one update.
--
-- Arrays hold one element per update, except `topics`, which holds every update's topics in turn
-- (`ntopics` says how many each has; the first is the canonical topic). `datas` are JSON strings
-- (or NULL) kept as written: PostgreSQL text cannot hold U+0000, JSON text can. An empty or NULL id
-- gets a generated `urn:uuid:` id. Returns each update's id, in input order. The row's `data` is
-- {"topics","id","private","retry","data"} (the hub builds frames from it in JavaScript), its
-- `type` the SSE event type; the notify is delivered at the caller's COMMIT, dropped on ROLLBACK.
-- The updates as rows, each with its own slice of `topics`.
create or replace function commitfeed.mercure_slices(
  topics text[], ntopics int[], datas json[], privates boolean[], ids text[], types text[], retries bigint[])
returns table (i bigint, ts text[], data json, private boolean, mid text, type text, retry bigint)
language sql
immutable
as $fn$
  select u.i,
         topics[(coalesce(sum(u.c) over (order by u.i rows between unbounded preceding and 1 preceding), 0) + 1)
                :(sum(u.c) over (order by u.i))],
         u.data, u.private, u.mid, u.type, u.retry
  from unnest(ntopics, datas, privates, ids, types, retries) with ordinality
       as u(c, data, private, mid, type, retry, i)
$fn$;

create or replace function commitfeed.mercure_append(
  topics text[], ntopics int[], datas json[], privates boolean[], ids text[], types text[], retries bigint[],
  internal boolean default false)
returns table (mid text)
language plpgsql
as $fn$
declare
  n int := coalesce(cardinality(ntopics), 0);
begin
  if n = 0 then
    return;
  end if;
  if coalesce(cardinality(topics), 0) <> (select coalesce(sum(c), 0) from unnest(ntopics) c)
     or exists (select 1 from unnest(ntopics) c where c is null or c < 0) then
    raise exception using errcode = '22023',
      message = 'commitfeed.mercure_append: ntopics must count the topics of each update';
  end if;
  perform commitfeed.refuse_invalid('commitfeed.mercure_append', 'update',
    array[n, cardinality(datas), cardinality(privates), cardinality(ids), cardinality(types), cardinality(retries)],
    array(select commitfeed.mercure_invalid(s.ts, nullif(s.mid, ''), s.type, s.retry,
                   s.data is null or json_typeof(s.data) in ('string', 'null'), internal)
          from commitfeed.mercure_slices(topics, ntopics, datas, privates, ids, types, retries) s
          order by s.i));
  return query
  with a as materialized (
    -- Ids taken here, in input order, so each feed row is matched to its update.
    select s.i, s.ts, s.data, coalesce(s.private, false) as private, s.type, s.retry,
           coalesce(nullif(s.mid, ''), 'urn:uuid:' || gen_random_uuid()) as m,
           nextval('commitfeed.feed_id_seq'::regclass) as id
    from commitfeed.mercure_slices(topics, ntopics, datas, privates, ids, types, retries) s
    order by s.i
  ), ins as (
    insert into commitfeed.feed (id, stream, type, key, data, mid)
    select a.id, 'mercure/updates', a.type, null,
           ('{"topics":' || to_json(a.ts)::text || ',"id":' || to_json(a.m)::text
             || ',"private":' || a.private::text || ',"retry":' || coalesce(a.retry::text, 'null')
             || ',"data":' || coalesce(a.data::text, 'null') || '}')::json,
           a.m
    from a
    order by a.i
    returning id, txid, created_at
  ), tp as (
    insert into commitfeed.mercure_topics (topic, txid, id, created_at)
    select distinct t.topic, ins.txid, ins.id, ins.created_at
    from ins join a on a.id = ins.id, unnest(a.ts) as t(topic)
  )
  select a.m from a order by a.i;
  perform pg_notify('commitfeed_feed', '');
end
$fn$;
