/**
 * commitfeed.append (src/sql/append.sql), the one write implementation: it validates, drops keys
 * already taken in the stream, inserts, and notifies once. The HTTP transaction endpoint, the library
 * API (src/index.ts), `commitfeed.publish` and enqueue's wake-up rows all go through it; the group
 * commit calls the same function without its checks (append-checked.ts). Every function takes
 * `(db | trx, ...)`: one autocommit statement, or the caller's transaction.
 */
import { CompiledQuery } from 'kysely';
import { columns } from '../../db/columns.ts';
import type { Db } from '../../db/database.ts';
import { prepared } from '../../db/prepared.ts';
import { type EventInput, FIELD_NAMES } from '../event.ts';
import { arrayArgs } from './event-columns.ts';

export interface AppendResult {
  /** The event's cursor. */
  id: string;
  stream: string;
  /** True when `key` matched an event already in the stream: nothing was appended. */
  duplicate: boolean;
}

const APPEND_SQL = prepared(`select cursor, duplicate from commitfeed.append(${arrayArgs(FIELD_NAMES)})`);

/** The parameters of commitfeed.append and append_unchecked: one array per field (a field left out: null). */
export function appendParams(events: readonly EventInput[]): unknown[] {
  return columns(events, FIELD_NAMES);
}

/** An append's answer carries one result per event: anything else is a bug, never bad input. */
export function expectOnePerEvent(fn: string, results: number, events: readonly unknown[]): void {
  if (results !== events.length)
    throw new Error(`${fn} returned ${results} results for ${events.length} events`);
}

/** An append's rows (one per event, in order) as results. */
export function appendResults(
  events: readonly EventInput[],
  rows: readonly { cursor: string; duplicate: boolean }[],
): AppendResult[] {
  expectOnePerEvent('commitfeed.append', rows.length, events);
  return rows.map((r, i) => ({ id: r.cursor, stream: events[i].stream, duplicate: r.duplicate }));
}

/**
 * Appends events in one statement and notifies the feed channel once; the notification is delivered
 * at the commit of `db`'s transaction (or of the statement itself when `db` is not a transaction).
 * Events with a `key` already present in their stream are not appended: their result carries the
 * original event's id and `duplicate: true` (commitfeed.feed_keys' primary key makes this hold
 * under concurrent retries, for DEDUP_WINDOW); a key repeated within the call is appended once, later copies report the first.
 *
 * @example
 *   await db.transaction().execute(async (trx) => {
 *     await trx.insertInto('orders').values(order).execute();
 *     await appendEvents(trx, [{ stream: 'orders', type: 'created', key: null, data: JSON.stringify(order) }]);
 *   });
 */
export async function appendEvents(db: Db, events: readonly EventInput[]): Promise<AppendResult[]> {
  if (events.length === 0) return [];
  const { rows } = await db.executeQuery<{ cursor: string; duplicate: boolean }>(
    CompiledQuery.raw(APPEND_SQL, appendParams(events)),
  );
  return appendResults(events, rows);
}
