-- commitfeed.append_plain: the insert and notify of commitfeed.append_unchecked for events without
-- keys (nothing to deduplicate), answering in one row: the transaction id and the new ids, comma-
-- separated in input order. The service's group commit calls it for groups without keys: one row
-- instead of one per event was ~1 µs less of the service's CPU per event of a 1,000-event batch
-- (node-postgres parses every row it receives) and no more of PostgreSQL's (bench/RESULTS.md, "Hot
-- path, round four"). append_unchecked's no-key path is this function, so there is one insert.
-- Unchecked like append_unchecked: callers must have applied commitfeed.append's rules.
create or replace function commitfeed.append_plain(streams text[], types text[], datas json[])
returns table (tx text, ids text)
language plpgsql
as $fn$
begin
  if coalesce(cardinality(streams), 0) = 0 then
    return;
  end if;
  -- Identity values are taken row by row as the insert reads unnest's output, so ascending ids
  -- are input order.
  return query
    with ins as (
      insert into commitfeed.feed (stream, type, data)
      select * from unnest(streams, types, datas)
      returning id
    )
    select pg_current_xact_id()::text, string_agg(ins.id::text, ',' order by ins.id) from ins;
  perform pg_notify('commitfeed_feed', '');
end
$fn$;
