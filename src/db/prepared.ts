/**
 * Named prepared statements for the hot queries. PostgreSQL plans a query against every partition
 * of the feed: measured on PostgreSQL 15 with six partitions, planning the tail read took 1.3 ms and
 * running it 0.2 ms, and it runs after every commit. A statement registered here with `prepared()`
 * is sent as a named statement the first time a connection runs it and only executed afterwards,
 * so its plan is made once per connection (PostgreSQL re-plans by itself when a partition is added
 * or dropped).
 *
 * Only fixed SQL texts are registered (each one costs every connection one prepared statement for
 * its lifetime); everything else goes through unchanged. Kysely hands its SQL to `client.query(text,
 * values)`, so a pg.Client subclass (the pool's `Client`) is where the name is attached.
 * PREPARED_STATEMENTS=off turns this off, e.g. behind a pooler that cannot keep named statements.
 */
import pg from 'pg';

const names = new Map<string, string>();

/** Registers `text` as a named prepared statement and returns it unchanged. */
export function prepared(text: string): string {
  if (!names.has(text)) names.set(text, `commitfeed_${names.size + 1}`);
  return text;
}

/** A pg.Client that runs registered texts as named prepared statements. */
export class PreparingClient extends pg.Client {
  // biome-ignore lint/suspicious/noExplicitAny: pg's query() has many overloads; this passes them through
  override query(config: any, values?: any, callback?: any): any {
    if (typeof config === 'string' && Array.isArray(values)) {
      const name = names.get(config);
      if (name !== undefined) return super.query({ name, text: config, values }, callback);
    }
    return super.query(config, values, callback);
  }
}
