/**
 * commitfeed as a library: publish events inside your application's own transaction (the
 * transactional outbox), next to your own writes. Both commit, or neither does; subscribers are
 * woken at your COMMIT (a `pg_notify` in your transaction), never for a rollback.
 *
 * Every function takes either a Kysely instance or transaction, or a node-postgres client (`pg.Client`,
 * a `PoolClient` inside BEGIN/COMMIT, or a `pg.Pool` for a single autocommit write). They check their
 * input with the HTTP API's rules (src/feed/validate.ts; an invalid input throws an `ApiError` with a
 * stable `code` before anything is sent) and write through the same SQL function as the server's
 * publish endpoint, `commitfeed.append` (migrations/0003_outbox.ts). The database needs commitfeed's
 * schema: start the service against it once, or call `migrate(db)`.
 */
import type { Kysely } from 'kysely';
import type { Db } from './db/database.ts';
import {
  APPEND_SQL,
  type AppendResult,
  type EventInput,
  appendEvents,
  appendParams,
  appendResults,
} from './feed/queries.ts';
import { toEventInput } from './feed/validate.ts';

export { ApiError } from './errors.ts';
export { migrate } from './db/migrate.ts';
export type { AppendResult } from './feed/queries.ts';

/** What the library writes with: Kysely (an instance or a transaction) or a node-postgres client. */
export type Executor =
  // biome-ignore lint/suspicious/noExplicitAny: any application database type
  Kysely<any> | { query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }> };

export interface PublishOptions {
  /** The SSE event name (1-200 characters, no control characters). */
  type?: string;
  /** Idempotency key, unique per stream: publishing it again appends nothing and returns the original. */
  key?: string;
}

export interface PublishInput extends PublishOptions {
  stream: string;
  /** Any JSON value. */
  data: unknown;
}

/**
 * Appends one event to `stream` in `trx`'s transaction and returns its cursor (`id`); `duplicate` is
 * true when `key` was already used in the stream (nothing appended; `id` is the original event's).
 *
 * @example
 *   import { publish } from 'commitfeed';
 *   await db.transaction().execute(async (trx) => {
 *     await trx.insertInto('orders').values({ id: 42, total: 9.5 }).execute();
 *     await publish(trx, 'orders', { order: 42, total: 9.5 }, { type: 'created', key: 'order-42' });
 *   });
 *   // node-postgres: await client.query('BEGIN'); ...; await publish(client, 'orders', {...}); await client.query('COMMIT');
 */
export async function publish(
  trx: Executor,
  stream: string,
  data: unknown,
  options: PublishOptions = {},
): Promise<AppendResult> {
  const [result] = await write(trx, [toInput({ ...options, stream, data }, 'event')]);
  return result;
}

/**
 * Appends several events (to any streams) in `trx`'s transaction, in order, with one statement and
 * one notify; results are in the same order. All are checked before any is sent.
 *
 * @example
 *   await db.transaction().execute(async (trx) => {
 *     await trx.updateTable('orders').set({ status: 'paid' }).where('id', '=', 42).execute();
 *     await publishMany(trx, [
 *       { stream: 'orders', data: { order: 42, status: 'paid' }, type: 'paid' },
 *       { stream: 'invoices', data: { order: 42 }, key: 'invoice-42' },
 *     ]);
 *   });
 */
export async function publishMany(trx: Executor, events: readonly PublishInput[]): Promise<AppendResult[]> {
  return write(
    trx,
    events.map((e, i) => toInput(e, `events[${i}]`)),
  );
}

function toInput(e: PublishInput, where: string): EventInput {
  const { stream, ...body } = e;
  return toEventInput(stream, body, Number.POSITIVE_INFINITY, where);
}

function isKysely(x: Executor): x is Kysely<unknown> {
  return typeof (x as { executeQuery?: unknown }).executeQuery === 'function';
}

async function write(trx: Executor, events: readonly EventInput[]): Promise<AppendResult[]> {
  if (events.length === 0) return [];
  if (isKysely(trx)) return appendEvents(trx as unknown as Db, events);
  const { rows } = await trx.query(APPEND_SQL, appendParams(events));
  return appendResults(events, rows as { cursor: string; duplicate: boolean }[]);
}
