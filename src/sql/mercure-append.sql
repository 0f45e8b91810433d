-- commitfeed.mercure_append: Mercure updates from SQL (validation, ids, the stored form), written by
-- commitfeed.append_plain as the group commit writes HTTP publishes (src/mercure/publish.ts,
-- updateEvent): the feed row, the topic index rows, the notify. commitfeed.mercure_publish (an
-- application's own transaction), the library function, the /v1/tx op and the hub's own updates
-- (active subscriptions) call it.
--
-- Arrays hold one element per update, except `topics`, which holds every update's topics in turn
-- (`ntopics` says how many each has; the first is the canonical topic). `datas` are JSON strings
-- (or NULL) kept as written: PostgreSQL text cannot hold U+0000, JSON text can. An empty or NULL id
-- gets a generated `urn:uuid:` id (random; HTTP publishes store none instead, see src/mercure/ids.ts:
-- their ids are encrypted positions, which SQL does not mint). Returns each update's id, in input
-- order. The row's `data` is {"topics","id","private","retry","data"} less what is implied (no
-- private when false, no retry when null: StoredForm in src/mercure/frames.ts, which builds frames
-- from it in JavaScript), its `type` the SSE event type; the notify is delivered at the caller's
-- COMMIT, dropped on ROLLBACK.
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
  mids text[];
  etypes text[];
  stored json[];
  canonical text[];
  alt_topics text[];
  alt_of int[];
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
  -- The stored form, as updateEvent (src/mercure/publish.ts) builds it.
  select array_agg(a.m order by a.i), array_agg(a.type order by a.i), array_agg(a.ts[1] order by a.i),
         array_agg(('{"topics":' || to_json(a.ts)::text || ',"id":' || to_json(a.m)::text
                    || case when a.private then ',"private":true' else '' end
                    || case when a.retry is null then '' else ',"retry":' || a.retry::text end
                    || ',"data":' || coalesce(a.data::text, 'null') || '}')::json order by a.i)
  into mids, etypes, canonical, stored
  from (select s.*, coalesce(nullif(s.mid, ''), 'urn:uuid:' || gen_random_uuid()) as m
        from commitfeed.mercure_slices(topics, ntopics, datas, privates, ids, types, retries) s) a;
  -- The canonical topic goes in the feed row, the other distinct topics in commitfeed.mercure_topics.
  select array_agg(t.topic order by t.i, t.topic), array_agg(t.i::int order by t.i, t.topic)
  into alt_topics, alt_of
  from (select distinct s.i, x.topic
        from commitfeed.mercure_slices(topics, ntopics, datas, privates, ids, types, retries) s,
             unnest(s.ts) as x(topic)
        where x.topic <> s.ts[1]) t;
  perform commitfeed.append_plain(array_fill('mercure/updates'::text, array[n]), etypes, stored, mids,
                                  canonical, alt_topics, alt_of);
  return query select u.m from unnest(mids) as u(m);
end
$fn$;
