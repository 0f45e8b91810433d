-- commitfeed.publish: the transactional outbox. An application calls it inside its own transaction,
-- next to its own writes: `insert into orders ...; select commitfeed.publish('orders', ...); commit;`.
-- One event through commitfeed.append.
create or replace function commitfeed.publish(stream text, data jsonb, type text default null, key text default null)
returns text
language plpgsql
as $fn$
declare
  problem text := commitfeed.invalid_name('stream', stream, stream);
begin
  -- Checked here too, not only by append: 'queue/...' streams belong to queues (enqueue writes
  -- them), and the name rule refuses the '/'.
  if problem is not null then
    raise exception using errcode = '22023', message = problem;
  end if;
  return (select a.cursor from commitfeed.append(array[stream], array[type], array[key], array[data::json]) a);
end
$fn$;

comment on function commitfeed.publish(text, jsonb, text, text) is
  'Appends one event to the commitfeed stream (inside the caller''s transaction: visible and notified at COMMIT, discarded on ROLLBACK) and returns its cursor. With a key already in the stream, appends nothing and returns the original event''s cursor.';
