-- commitfeed.append_plain: the insert and notify of commitfeed.append_unchecked for events without
-- keys (nothing to deduplicate), answering in one row: the transaction id, the new ids comma-
-- separated in input order, and the rows' created_at as epoch milliseconds (one time for the whole
-- statement, so that the service can hold the events as the tail read would return them: see
-- src/feed/own-writes.ts). The service's group commit calls it for groups without keys: one row
-- instead of one per event was ~1.5 µs less of the service's CPU per event of a 1,000-event batch
-- (node-postgres parses every row it receives) and no more of PostgreSQL's (bench/HISTORY.md, "Hot
-- path, round four"). append_unchecked's no-key path is this function, so there is one insert.
--
-- The Mercure hub's updates (stream mercure/updates) are written here too, by the group commit and
-- by commitfeed.mercure_append: `mids` is each event's Mercure id (the feed's `mid` column), `topics`
-- its canonical topic (the `topic` column, whose index serves exact-topic catch-up), and `alt_topics`
-- its other distinct topics, `alt_of[j]` the 1-based position of the event `alt_topics[j]` belongs to
-- (rows of commitfeed.mercure_topics). All NULL for native events. An update with one topic costs one
-- row and its index entries, as a native event does, plus two (topic and id); only alternates take
-- a second statement.
-- Unchecked like append_unchecked: callers must have applied commitfeed.append's rules (or
-- commitfeed.mercure_invalid's).
create or replace function commitfeed.append_plain(
  streams text[], types text[], datas json[],
  mids text[] default null, topics text[] default null, alt_topics text[] default null,
  alt_of int[] default null)
returns table (tx text, ids text, ms float8)
language plpgsql
as $fn$
declare
  at timestamptz;
  new_ids bigint[];
begin
  if coalesce(cardinality(streams), 0) = 0 then
    return;
  end if;
  -- The transaction id first, then the time: a row's transaction has its id before the row's
  -- created_at, which the tail read's floor relies on (TailFloor in src/feed/queries/read-tail.ts).
  -- clock_timestamp(), not now(): a row committed late must not be born already expired.
  perform pg_current_xact_id();
  at := clock_timestamp();
  -- Identity values are taken row by row as the insert reads unnest's output, so ascending ids
  -- are input order. (unnest pads a NULL `mids` or `topics` with NULLs.)
  if alt_topics is null then
    return query
      with ins as (
        insert into commitfeed.feed (stream, type, data, created_at, mid, topic)
        select u.stream, u.type, u.data, at, u.mid, u.topic
        from unnest(streams, types, datas, mids, topics) as u(stream, type, data, mid, topic)
        returning id
      )
      -- The same expression as the tail read's (EVENT_COLUMNS in src/feed/queries/event-columns.ts).
      select pg_current_xact_id()::text, string_agg(ins.id::text, ',' order by ins.id),
             extract(epoch from at)::float8 * 1000
      from ins;
  else
    with ins as (
      insert into commitfeed.feed (stream, type, data, created_at, mid, topic)
      select u.stream, u.type, u.data, at, u.mid, u.topic
      from unnest(streams, types, datas, mids, topics) as u(stream, type, data, mid, topic)
      returning id
    )
    select array_agg(ins.id order by ins.id) into new_ids from ins;
    -- created_at copies the feed row's, so that catch-up's join to the feed prunes to its partition.
    insert into commitfeed.mercure_topics (topic, txid, id, created_at)
    select t.topic, pg_current_xact_id(), new_ids[t.i], at
    from unnest(alt_topics, alt_of) as t(topic, i);
    return query
      select pg_current_xact_id()::text, array_to_string(new_ids, ','), extract(epoch from at)::float8 * 1000;
  end if;
  perform commitfeed.notify_feed();
end
$fn$;
