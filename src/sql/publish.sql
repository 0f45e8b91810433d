-- commitfeed.publish: the transactional outbox. An application calls it inside its own transaction,
-- next to its own writes: `insert into orders ...; select commitfeed.publish('orders', ...); commit;`.
-- One event through commitfeed.append.
create or replace function commitfeed.publish(stream text, data jsonb, type text default null, key text default null)
returns text
language plpgsql
as $fn$
begin
  -- 'queue/...' streams belong to queues (enqueue writes them): not for publishing.
  if strpos(stream, '/') > 0 then
    raise exception using errcode = '22023', message = format(
      'stream name must be 1-200 characters of letters, digits and . _ : - (got %s)',
      to_json(left(stream, 80))::text);
  end if;
  return (select a.cursor from commitfeed.append(array[stream], array[type], array[key], array[data::json]) a);
end
$fn$;

comment on function commitfeed.publish(text, jsonb, text, text) is
  'Appends one event to the commitfeed stream (inside the caller''s transaction: visible and notified at COMMIT, discarded on ROLLBACK) and returns its cursor. With a key already in the stream, appends nothing and returns the original event''s cursor.';
