-- commitfeed.tail_clear: what the service needs to deliver the events of transaction `tx` (the
-- caller's own, still open) the moment it commits, without a tail read: the transactions with lower
-- ids that stand between the tailer's position (`after_txid`, `after_id`) and `tx`'s rows, outside
-- those in `own` (whose events the service holds, src/feed/own-writes.ts). They are the ones that may
-- still be running, and the finished ones that left a row past the position. Once each of them is
-- one of the service's own statements that has committed (so held) or the tailer is past it, the
-- feed up to `tx`'s last row is exactly what the service has (the tailer checks: src/feed/tailer.ts,
-- committed); no transaction can take an id below `tx` later. Empty, the usual answer without
-- concurrent writers; NULL when there are more than 16 (the tailer reads instead). The group commit
-- asks it in the same statement as its append (src/feed/queries/append-plain.ts).
--
-- PL/pgSQL, volatile: the query below runs with a snapshot of its own, taken after `tx` has its id
-- (a snapshot taken before could miss a transaction that took a lower id in between). Ids below the
-- snapshot's xmax that are running are in its xip list (this transaction's own is left out); no id
-- at or above xmax had completed when it was taken. `floor_at`, `floor_margin`: the tail floor
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
  found xid8[];
begin
  select array(
           (select distinct f.txid from commitfeed.feed f
            where (f.txid, f.id) > (after_txid, after_id) and f.txid < tx
              and f.txid <> all(own)
              and f.created_at >= least(floor_at, now() - floor_margin)
            order by f.txid limit 17)
           union
           select x from pg_snapshot_xip(s.snap) x where x < tx
           union
           select g::text::xid8
           -- at most 17 of them: more is NULL anyway
           from generate_series(pg_snapshot_xmax(s.snap)::text::int8,
                                least(tx::text::int8, pg_snapshot_xmax(s.snap)::text::int8 + 17) - 1) g)
    from (select pg_current_snapshot() as snap) s
    into found;
  return case when cardinality(found) > 16 then null else found end;
end
$fn$;
