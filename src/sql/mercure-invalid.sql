-- commitfeed.mercure_invalid: the rules of src/mercure/publish.ts (validateUpdate) for one Mercure
-- update, restated for the SQL entry points: what is wrong with it (NULL when it is valid). Lengths
-- are in characters; the limits are the hub's (LIMITS in src/mercure/publish.ts). Control characters are C0,
-- DEL and C1; format characters are Unicode's general category Cf (Unicode 17, generated from
-- JavaScript's \p{Cf}; test/mercure-sql.test.ts checks that both agree). `internal`: the hub's own
-- updates (Mercure subscription events) may use the reserved namespace and the type `mercure`.
create or replace function commitfeed.mercure_invalid(
  topics text[], id text, type text, retry bigint, data_is_string boolean, internal boolean)
returns text
language sql
immutable
parallel safe
return case
  when coalesce(cardinality(topics), 0) = 0 then 'an update needs at least one topic'
  when cardinality(topics) > 32 then 'an update has at most 32 topics'
  when exists (select 1 from unnest(topics) t where t is null) then 'a topic must not be NULL'
  when exists (select 1 from unnest(topics) t where t = '*') then
    'the topic "*" is reserved for the wildcard matcher'
  when exists (select 1 from unnest(topics) t where octet_length(t) > 2048) then
    'a topic is at most 2048 bytes'
  when exists (select 1 from unnest(topics) t
               where t ~ '[\x01-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]')
    then 'a topic must not contain control or format characters'
  when not internal and exists (select 1 from unnest(topics) t where commitfeed.mercure_reserved(t)) then
    'a topic must not address the hub''s reserved namespace (/.well-known/mercure)'
  when id is not null and (left(id, 1) = '#' or id = 'earliest') then
    'an id must not start with "#" nor be "earliest"'
  when char_length(id) > 1024 then 'an id is at most 1024 characters'
  when id ~ '[\x01-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]'
    then 'an id must not contain control or format characters'
  when char_length(type) > 200 then 'a type is at most 200 characters'
  when type ~ '[\x01-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]'
    then 'a type must not contain control or format characters'
  when type = 'mercure' and not internal then 'the type "mercure" is reserved for the hub''s own updates'
  when retry < 0 or retry > 9999999999 then 'retry must be 0 to 9999999999 (milliseconds)'
  when not data_is_string then 'data must be a JSON string or null'
end;
