-- commitfeed.mercure_publish: a Mercure update from the application's own transaction, next to its
-- own writes: `insert into books ...; select commitfeed.mercure_publish(array['https://example.com/books/1'],
-- '{"title":"..."}'); commit;`. Subscribers receive it at COMMIT; ROLLBACK publishes nothing and
-- wakes nobody. Returns the update's id (the given one, or a generated urn:uuid). `topics[1]` is the
-- canonical topic, the rest are alternates. Validated as an HTTP publish is (SQLSTATE 22023).
create or replace function commitfeed.mercure_publish(
  topics text[], data text default null, private boolean default false, id text default null,
  type text default null, retry bigint default null)
returns text
language sql
as $fn$
  select a.mid from commitfeed.mercure_append(topics, array[cardinality(topics)], array[to_json(data)],
    array[coalesce(private, false)], array[id], array[type], array[retry]) a
$fn$;

-- One topic.
create or replace function commitfeed.mercure_publish(
  topic text, data text default null, private boolean default false, id text default null,
  type text default null, retry bigint default null)
returns text
language sql
as $fn$
  select commitfeed.mercure_publish(array[topic], data, private, id, type, retry)
$fn$;

comment on function commitfeed.mercure_publish(text[], text, boolean, text, text, bigint) is
  'Publishes a Mercure update to the commitfeed hub inside the caller''s transaction (delivered at COMMIT, discarded on ROLLBACK) and returns its id.';
