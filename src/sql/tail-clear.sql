-- commitfeed.tail_clear: what the service needs to deliver the events of transaction `tx` (the
-- caller's own, still open) the moment it commits, without a tail read: the transactions with lower
-- ids that stand between the tailer's position (`after_txid`, `after_id`) and `tx`'s rows, outside
-- those in `own` (whose events the service holds, src/feed/own-writes.ts). They are the ones that may
-- still be running, and the finished ones that left a row past the position. Once each of them is
-- one of the service's own statements that has committed (so held) or the tailer is past it, the
-- feed up to `tx`'s last row is exactly what the service has (the tailer checks: src/feed/cleared.ts);
-- no transaction can take an id below `tx` later. Empty, the usual answer without concurrent
-- writers. NULL, and the tailer reads instead: when retention has trimmed past the position (a read
-- must see the trim mark), or when more than 32 transactions would have to be looked at. The group
-- commit asks it in the same statement as its append (src/feed/queries/append-plain.ts).
--
-- Volatile PL/pgSQL: each statement below takes a snapshot of its own. The first one names the lower
-- ids still running (its xip list; this transaction's own is left out) and every id from its xmax up
-- (none of those had completed). The scans for rows come after it: a lower transaction that had
-- finished by then shows all its rows to them, and one that had not is named already. They go from
-- one transaction id to the next by the (txid, id) index, one probe each, so a large unread
-- transaction costs no more than a small one. `floor_at`, `floor_margin`: the tail floor
-- (src/feed/queries/read-tail.ts, TailFloor), so that only the newest partitions are probed.
create or replace function commitfeed.tail_clear(
  tx xid8, after_txid xid8, after_id int8, own xid8[], floor_at timestamptz, floor_margin interval)
returns xid8[]
language plpgsql
volatile
-- A custom plan for every call would plan the scan of every partition (~1 ms with a week of them);
-- the generic plan prunes them when it starts, as the tail read's does.
set plan_cache_mode = force_generic_plan
as $fn$
declare
  named xid8[];
  x xid8;
  looked int := 0;
  floor timestamptz := least(floor_at, now() - floor_margin);
begin
  if (select (m.txid, m.id) > (after_txid, after_id) from commitfeed.trim_mark m) then
    return null;
  end if;
  select array(select r from pg_snapshot_xip(s.snap) r where r < tx
               union all
               select g::text::xid8
               from generate_series(pg_snapshot_xmax(s.snap)::text::int8,
                                    least(tx::text::int8, pg_snapshot_xmax(s.snap)::text::int8 + 33) - 1) g)
    from (select pg_current_snapshot() as snap) s
    into named;
  if cardinality(named) > 32 then
    return null;
  end if;
  select f.txid into x from commitfeed.feed f
  where (f.txid, f.id) > (after_txid, after_id) and f.txid < tx and f.created_at >= floor
  order by f.txid, f.id limit 1;
  while x is not null loop
    looked := looked + 1;
    if looked > 32 then
      return null;
    end if;
    if x <> all(own) and x <> all(named) then
      named := named || x;
    end if;
    select f.txid into x from commitfeed.feed f
    where f.txid > x and f.txid < tx and f.created_at >= floor
    order by f.txid, f.id limit 1;
  end loop;
  return named;
end
$fn$;
