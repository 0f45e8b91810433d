-- commitfeed.refuse_invalid: how the set-based write functions (append, enqueue_jobs) refuse a call.
-- `lengths` holds the cardinality of each array argument (all must match); `messages` holds, per
-- input in order, what is wrong with it or NULL. Raises SQLSTATE 22023 with the first input's
-- message, naming its position when the call had several ("(event 3 of 10)"), so a caller's whole
-- transaction is refused before anything is written.
create or replace function commitfeed.refuse_invalid(caller text, item text, lengths integer[], messages text[])
returns void
language plpgsql
as $fn$
declare
  n int := lengths[1];
  bad record;
begin
  if exists (select 1 from unnest(lengths) as l(len) where l.len is distinct from n) then
    raise exception using errcode = '22023',
      message = format('%s: every argument must be an array of the same length', caller);
  end if;
  select m.i, m.message into bad
  from unnest(messages) with ordinality as m(message, i)
  where m.message is not null
  order by m.i
  limit 1;
  if found then
    raise exception using errcode = '22023',
      message = bad.message || case when n > 1 then format(' (%s %s of %s)', item, bad.i, n) else '' end;
  end if;
end
$fn$;
