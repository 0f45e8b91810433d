-- commitfeed.floor_mark: a transaction id taken now, and the time before it was taken (epoch ms).
-- Every transaction id assigned before `at` is below `xid`: ids are handed out in order, and this
-- transaction's started after `at`. The tailer's floor (src/feed/tail-floor.ts) needs exactly that;
-- a snapshot's xmax does not give it (a transaction still running can hold an id at or above it).
-- It writes nothing but its commit record, which nothing waits on: synchronous_commit is off.
create or replace function commitfeed.floor_mark(out xid text, out at float8)
language plpgsql
as $fn$
begin
  perform set_config('synchronous_commit', 'off', true);
  -- now(): this transaction's start, before the id below is assigned.
  at := extract(epoch from now())::float8 * 1000;
  xid := pg_current_xact_id()::text;
end
$fn$;
