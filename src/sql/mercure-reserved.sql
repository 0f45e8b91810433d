-- commitfeed.mercure_reserved: true when a Mercure topic addresses the hub's reserved namespace
-- (draft-08 §Publication): resolved against the hub URL (whose path is always /.well-known/mercure,
-- where the hub is served), its path, with percent-encoded unreserved characters decoded and dot
-- segments removed, equals the hub path or starts with it plus '/', whatever the scheme or host.
-- The JavaScript side (src/mercure/publish.ts, reservedTopic) uses the WHATWG URL parser; this is
-- the same resolution restated for the forms a topic can take (test/mercure-sql.test.ts compares
-- both on the draft's examples and hostile variants).
create or replace function commitfeed.mercure_reserved(topic text)
returns boolean
language plpgsql
immutable
parallel safe
as $fn$
declare
  hub constant text := '/.well-known/mercure';
  t text := btrim(topic, E' \t\n\r');
  scheme text := lower(substring(t from '^([A-Za-z][A-Za-z0-9+.-]*):'));
  special boolean;
  p text;
  m text[];
  out text[] := '{}';
  seg text;
  segs text[];
  n int;
  i int;
begin
  if scheme is not null then
    t := substr(t, char_length(scheme) + 2);
    special := scheme in ('http', 'https', 'ws', 'wss', 'ftp', 'file');
  else
    special := true; -- relative to the hub's http(s) URL
  end if;
  t := regexp_replace(t, E'[\t\n\r]', '', 'g');
  if special then t := replace(t, '\', '/'); end if;
  t := split_part(split_part(t, '#', 1), '?', 1);
  if scheme is not null and special then
    -- A special scheme: the authority follows, after any slashes (`https:evil/x` names host evil).
    p := substring(t from '^/*[^/]*(.*)$');
  elsif left(t, 2) = '//' then
    p := substring(t from '^//[^/]*(.*)$');
  elsif scheme is not null then
    -- A non-special scheme with an opaque path (`urn:x`) names no hub path.
    if left(t, 1) <> '/' then return false; end if;
    p := t;
  elsif left(t, 1) = '/' then
    p := t;
  elsif t = '' then
    p := hub;
  else
    p := '/.well-known/' || t; -- merged with the hub URL's directory
  end if;
  -- Decode %XX of unreserved characters (ALPHA DIGIT - . _ ~), then remove dot segments.
  for m in select regexp_matches(p, '%([0-9A-Fa-f]{2})', 'g') loop
    seg := chr(('x' || m[1])::bit(8)::int);
    if seg ~ '^[A-Za-z0-9._~-]$' then
      p := replace(p, '%' || m[1], seg);
    end if;
  end loop;
  segs := string_to_array(p, '/');
  n := coalesce(array_length(segs, 1), 0);
  for i in 2..n loop
    seg := segs[i];
    if seg = '.' then
      if i = n then out := out || ''; end if;
    elsif seg = '..' then
      out := out[1:greatest(coalesce(array_length(out, 1), 0) - 1, 0)];
      if i = n then out := out || ''; end if;
    else
      out := out || seg;
    end if;
  end loop;
  p := '/' || array_to_string(out, '/');
  return p = hub or left(p, char_length(hub) + 1) = hub || '/';
end
$fn$;
