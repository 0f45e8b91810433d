-- commitfeed.append_plain: the insert and notify of commitfeed.append_unchecked for events without
-- keys (nothing to deduplicate), answering in one row: the transaction id, the new ids comma-
-- separated in input order, and the rows' created_at as epoch milliseconds (one time for the whole
-- statement, so that the service can hold the events as the tail read would return them: see
-- src/feed/own-writes.ts). The service's group commit calls it for groups without keys: one row
-- instead of one per event was ~1.5 µs less of the service's CPU per event of a 1,000-event batch
-- (node-postgres parses every row it receives) and no more of PostgreSQL's (bench/RESULTS.md, "Hot
-- path, round four"). append_unchecked's no-key path is this function, so there is one insert.
-- Unchecked like append_unchecked: callers must have applied commitfeed.append's rules.
create or replace function commitfeed.append_plain(streams text[], types text[], datas json[])
returns table (tx text, ids text, ms float8)
language plpgsql
as $fn$
declare
  at timestamptz;
begin
  if coalesce(cardinality(streams), 0) = 0 then
    return;
  end if;
  -- The transaction id first, then the time: a row's transaction has its id before the row's
  -- created_at, which the tail read's floor relies on (TailFloor in src/feed/queries.ts).
  -- clock_timestamp(), not now(): a row committed late must not be born already expired.
  perform pg_current_xact_id();
  at := clock_timestamp();
  -- Identity values are taken row by row as the insert reads unnest's output, so ascending ids
  -- are input order.
  return query
    with ins as (
      insert into commitfeed.feed (stream, type, data, created_at)
      select u.stream, u.type, u.data, at from unnest(streams, types, datas) as u(stream, type, data)
      returning id
    )
    -- The same expression as the tail read's (src/feed/queries.ts, EVENT_COLUMNS).
    select pg_current_xact_id()::text, string_agg(ins.id::text, ',' order by ins.id),
           extract(epoch from at)::float8 * 1000
    from ins;
  perform pg_notify('commitfeed_feed', '');
end
$fn$;
