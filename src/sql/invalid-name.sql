-- commitfeed.invalid_name: the stream and queue name rule of src/feed/validate.ts (assertName), for
-- every SQL function that takes a name: what is wrong with `name` (NULL when it is valid), showing
-- `shown` (the argument as the caller wrote it) in the message. Lengths are in characters (code
-- points). Not '^[...]{1,200}$': PostgreSQL's regex engine takes ~100 us per match with a bounded
-- repeat, more than an insert. A plain SQL expression, so PostgreSQL inlines it into the callers'
-- queries: no function call per row (measured: 4.7 us per row called, 0.7 inlined). Stable, not
-- immutable: format() and to_json() are stable, and a function is only inlined when its body is no
-- more volatile than it is declared.
create or replace function commitfeed.invalid_name(what text, name text, shown text)
returns text
language sql
stable
parallel safe
return case
  when name is null or char_length(name) not between 1 and 200 or name ~ '[^A-Za-z0-9._:-]' then
    format('%s name must be 1-200 characters of letters, digits and . _ : - (got %s)',
           what, coalesce(to_json(left(shown, 80))::text, 'null'))
end;
