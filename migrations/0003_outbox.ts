// The write path as SQL functions: `commitfeed.append` is the one implementation of appending events
// (validation, key dedup, insert, notify). The service's batcher, the library API and
// `commitfeed.publish` (for applications' own transactions: the transactional outbox) all call it.
// Frozen: never edit after release, add a new migration instead. Never import application code here:
// the name rules, the table and the channel (`commitfeed_feed`) are spelled out below on purpose.
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // Set-based: one call appends a whole batch. Returns one row per input, in input order:
  // the event's cursor and whether it was a duplicate (its key already in the stream, or repeated
  // earlier in the same call: the original event's cursor is returned and nothing is appended).
  // The notify is delivered at the caller's COMMIT and dropped with its ROLLBACK; appends that add
  // nothing (all duplicates) do not notify.
  await sql`
    create function commitfeed.append(streams text[], types text[], keys text[], datas json[])
    returns table (cursor text, duplicate boolean)
    language plpgsql
    as $fn$
    declare
      n int := coalesce(cardinality(streams), 0);
      bad record;
      pre bigint[];      -- per input: the id it was given (a repeated key: its first copy's)
      repeat boolean[];  -- per input: its (stream, key) appeared earlier in the call
      inserted bigint[];
      tx text;
    begin
      if n = 0 then
        return;
      end if;
      if coalesce(cardinality(types), 0) <> n or coalesce(cardinality(keys), 0) <> n
         or coalesce(cardinality(datas), 0) <> n then
        raise exception using errcode = '22023',
          message = 'commitfeed.append: streams, types, keys and datas must be arrays of the same length';
      end if;
      -- The same rules as the HTTP API (src/feed/validate.ts; a test checks they agree). Lengths are
      -- in characters (code points). Not '^[...]{1,200}$': PostgreSQL's regex engine takes ~100 us
      -- per match with a bounded repeat, more than the insert itself.
      -- A stream is a name, or 'queue/' and a queue name (a queue's wake-up stream, written by enqueue).
      select s.i, s.stream, s.type, s.key, s.data is null as nodata into bad
      from unnest(streams, types, keys, datas) with ordinality as s(stream, type, key, data, i),
           lateral (select case when left(s.stream, 6) = 'queue/' then substr(s.stream, 7)
                                else s.stream end as name) nm
      where nm.name is null or char_length(nm.name) not between 1 and 200
         or nm.name ~ '[^A-Za-z0-9._:-]'
         or char_length(s.type) not between 1 and 200 or s.type ~ '[\\x01-\\x1f\\x7f]'
         or char_length(s.key) not between 1 and 200
         or s.data is null
      order by s.i
      limit 1;
      if found then
        raise exception using errcode = '22023', message = case
          when bad.stream is null or bad.stream !~ '^(queue/)?[A-Za-z0-9._:-]+$'
               or char_length(regexp_replace(bad.stream, '^queue/', '')) > 200 then
            format('stream name must be 1-200 characters of letters, digits and . _ : - (got %s)',
                   coalesce(to_json(left(bad.stream, 80))::text, 'null'))
          when bad.nodata then 'data must not be SQL NULL (use ''null''::json for a JSON null)'
          when char_length(bad.type) not between 1 and 200 or bad.type ~ '[\\x01-\\x1f\\x7f]' then
            'type must be 1-200 characters without control characters'
          else 'key must be 1-200 characters'
        end || case when n > 1 then format(' (event %s of %s)', bad.i, n) else '' end;
      end if;

      if cardinality(array_remove(keys, null)) = 0 then
        -- No keys (the common case): nothing can be a duplicate. Identity values are taken row by row
        -- as the insert reads unnest's output, so ascending ids are input order.
        with ins as (
          insert into commitfeed.feed (stream, type, key, data)
          select * from unnest(streams, types, keys, datas)
          returning id
        )
        select array(select ins.id from ins order by ins.id) into inserted;
        perform pg_notify('commitfeed_feed', '');
        tx := pg_current_xact_id()::text;
        return query select tx || '-' || x.id::text, false from unnest(inserted) as x(id);
        return;
      end if;

      -- With keys: ids are taken here, in input order, so each input is matched to its row by id (RETURNING
      -- order is not guaranteed); ON CONFLICT only skips a sequence value.
      with u as (
        select s.i, s.stream, s.type, s.key, s.data,
               case when s.key is null then s.i
                    else min(s.i) over (partition by s.stream collate "C", s.key collate "C") end as first
        from unnest(streams, types, keys, datas) with ordinality as s(stream, type, key, data, i)
      ), a as materialized (
        select u.i, nextval('commitfeed.feed_id_seq'::regclass) as id, u.stream, u.type, u.key, u.data
        from u where u.first = u.i
        order by u.i
      ), ins as (
        insert into commitfeed.feed (id, stream, type, key, data) overriding system value
        select a.id, a.stream, a.type, a.key, a.data from a
        on conflict (stream, key) where key is not null do nothing
        returning id
      )
      select array(select a.id from u join a on a.i = u.first order by u.i),
             array(select u.first <> u.i from u order by u.i),
             array(select ins.id from ins)
      into pre, repeat, inserted;

      if cardinality(inserted) > 0 then
        perform pg_notify('commitfeed_feed', '');
        tx := pg_current_xact_id()::text;
      end if;
      if cardinality(inserted) = cardinality(pre) - (select count(*) from unnest(repeat) r where r) then
        -- Everything new was appended (the common case).
        return query select tx || '-' || p.id::text, p.r from unnest(pre, repeat) as p(id, r);
        return;
      end if;
      -- Some keys were already in their stream: report the existing events. This statement has a
      -- fresh snapshot, so it sees a conflicting row that a concurrent transaction just committed.
      return query
        select case when i.id is not null then tx || '-' || p.id::text
                    else (select f.txid::text || '-' || f.id::text from commitfeed.feed f
                          where f.stream = streams[p.i] and f.key = keys[p.i]) end,
               p.r or i.id is null
        from unnest(pre, repeat) with ordinality as p(id, r, i)
        left join unnest(inserted) as i(id) on i.id = p.id
        order by p.i;
    end
    $fn$`.execute(db);

  // The transactional outbox: call inside your own transaction, next to your own writes.
  await sql`
    create function commitfeed.publish(stream text, data jsonb, type text default null, key text default null)
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
    $fn$`.execute(db);
  await sql`comment on function commitfeed.publish(text, jsonb, text, text) is
    'Appends one event to the commitfeed stream (inside the caller''s transaction: visible and notified at COMMIT, discarded on ROLLBACK) and returns its cursor. With a key already in the stream, appends nothing and returns the original event''s cursor.'`.execute(
    db,
  );
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop function commitfeed.publish(text, jsonb, text, text)`.execute(db);
  await sql`drop function commitfeed.append(text[], text[], text[], json[])`.execute(db);
}
