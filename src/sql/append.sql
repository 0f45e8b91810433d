-- commitfeed.append: appending events, for every caller: checks the input, then hands it to
-- commitfeed.append_unchecked (key dedup, insert, notify). The HTTP transaction endpoint's own
-- transactions, the library API, commitfeed.publish and commitfeed.enqueue_jobs (a queue's wake-up
-- row) call it; the service's group commit calls append_unchecked, having checked every event with
-- the same rules in TypeScript.
--
-- Set-based: one call appends a whole batch. Returns one row per input, in input order: the event's
-- cursor (tagged with the feed, `<txid>-<id>.<tag>`, as every answer of the service: see
-- cursor-suffix.sql) and whether it was a duplicate (its key already taken in the stream within the dedup window,
-- or repeated earlier in the same call: the original event's cursor is returned and nothing is
-- appended). The notify is delivered at the caller's COMMIT and dropped with its ROLLBACK; calls that
-- add nothing (all duplicates) do not notify.
create or replace function commitfeed.append(streams text[], types text[], keys text[], datas json[])
returns table (cursor text, duplicate boolean)
language plpgsql
as $fn$
declare
  n int := coalesce(cardinality(streams), 0);
  suffix text;
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

  suffix := commitfeed.cursor_suffix();
  return query select u.cursor || suffix, u.duplicate
               from commitfeed.append_unchecked(streams, types, keys, datas) u;
end
$fn$;
