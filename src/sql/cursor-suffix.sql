-- commitfeed.cursor_suffix: what follows `<txid>-<id>` in this feed's cursors: a dot and the feed's
-- tag, the first 8 hexadecimal digits of its epoch (commitfeed.feed_epoch), as src/feed/cursor.ts
-- (epochTag, tagSuffix) makes it; test/cursor-suffix.test.ts checks that both agree. The SQL
-- functions that answer with cursors (commitfeed.append, so commitfeed.publish, and the jobs of a
-- stream subscription) end them with it, so that a cursor has one form wherever it is read. The
-- group commit's functions (append_unchecked, append_plain) do not call it: the service adds the tag
-- it read at start-up (src/feed/history.ts).
-- Called once per statement, not per row: it reads a table, so PostgreSQL cannot inline it.
create or replace function commitfeed.cursor_suffix()
returns text
language sql
stable
parallel safe
return (select '.' || left(replace(e.epoch::text, '-', ''), 8) from commitfeed.feed_epoch e);
