/**
 * commitfeed as a library: publish events and enqueue jobs inside your application's own
 * transaction (the transactional outbox), next to your own writes. Both commit, or neither does;
 * subscribers and waiting claimers are woken at your COMMIT (a `pg_notify` in your transaction),
 * never for a rollback.
 *
 * Every function takes a Kysely transaction (or instance), a node-postgres client inside your
 * BEGIN/COMMIT (`pg.Client`, `PoolClient`), or a `pg.Pool` (then each call is its own transaction).
 * They check their input with the HTTP API's rules (src/feed/validate.ts, src/queues/validate.ts: an
 * invalid input throws an `ApiError` with the API's `code` before anything is sent) and write with
 * the server's own code: appendEvents (the SQL function `commitfeed.append`) and enqueueJobs. The
 * database needs commitfeed's schema: start the service against it once, or call `migrate(kysely)`.
 */
import { Kysely, PostgresDialect, type PostgresPool } from 'kysely';
import type { Db } from './db/database.ts';
import { type EventBody, type EventInput, toEventInput } from './feed/event.ts';
import { type AppendResult, appendEvents } from './feed/queries/append.ts';
import { type EnqueueResult, type JobInput, enqueueJobs } from './queues/enqueue.ts';
import { type JobBody, toJobInput } from './queues/validate.ts';
import { HUB_PATH, type UpdateInput, appendUpdates, updateFromInput } from './mercure/publish.ts';

export { ApiError } from './errors.ts';
export { migrate } from './db/migrate.ts';
export { mercureLink } from './mercure/discovery.ts';
export type { AppendResult } from './feed/queries/append.ts';
export type { EnqueueResult } from './queues/enqueue.ts';
export type { Backoff } from './queues/validate.ts';
export type { UpdateInput as MercureUpdateInput } from './mercure/publish.ts';

/** What the library writes with: Kysely (an instance or a transaction), a node-postgres client or pool. */
export type Executor =
  // biome-ignore lint/suspicious/noExplicitAny: any application database type
  | Kysely<any>
  // biome-ignore lint/suspicious/noExplicitAny: pg's overloaded query signature
  | { query(text: string, values?: any[]): Promise<any> };

/** An event's optional fields (EVENT_FIELDS in src/feed/event.ts): `type`, the SSE event name (1-200
 * characters, no control characters); `key`, an idempotency key, unique per stream: publishing it again
 * appends nothing and returns the original. */
export type PublishOptions = Omit<EventBody, 'data'>;

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
  const [result] = await publishMany(trx, [{ ...options, stream, data }]);
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
  const inputs: EventInput[] = events.map(({ stream, ...body }, i) =>
    toEventInput(stream, body, Number.POSITIVE_INFINITY, events.length === 1 ? 'event' : `events[${i}]`),
  );
  return inputs.length === 0 ? [] : withDb(trx, (db) => appendEvents(db, inputs));
}

/**
 * Publishes a Mercure update to the hub at /.well-known/mercure in `trx`'s transaction and returns
 * its id (the given one, or a generated `urn:uuid:`); subscribers receive it at your COMMIT, never
 * for a rollback. Checked with the hub's rules (an invalid update throws an ApiError with its code).
 * `hubUrl`: the hub's URL, for relative topics (default: a path-only stand-in, which is all the
 * reserved-namespace rule needs).
 *
 * @example
 *   import { mercurePublish } from 'commitfeed';
 *   await db.transaction().execute(async (trx) => {
 *     await trx.updateTable('books').set({ title }).where('id', '=', 1).execute();
 *     await mercurePublish(trx, { topic: 'https://example.com/books/1', data: JSON.stringify({ title }) });
 *   });
 */
export async function mercurePublish(
  trx: Executor,
  update: UpdateInput,
  hubUrl = `http://localhost${HUB_PATH}`,
): Promise<string> {
  const u = updateFromInput(update, hubUrl, Number.POSITIVE_INFINITY, 'update');
  const [id] = await withDb(trx, (db) => appendUpdates(db, [u]));
  return id;
}

export type EnqueueOptions = Omit<JobBody, 'payload'>;

export interface EnqueueInput extends EnqueueOptions {
  queue: string;
  /** Any JSON value, handed to the worker as is. */
  payload: unknown;
}

/**
 * Puts one job on `queue` in `trx`'s transaction; waiting claimers are woken at commit. `duplicate`
 * is true when `key` matches a job of the queue not yet completed (nothing enqueued; `id` is that
 * job's). Options as for `POST /v1/queues/{queue}/jobs`: `delay` or `runAt`, `priority`, `key`,
 * `maxAttempts`, `backoff`.
 *
 * @example
 *   import { enqueue } from 'commitfeed';
 *   await db.transaction().execute(async (trx) => {
 *     await trx.insertInto('orders').values({ id: 42, total: 9.5 }).execute();
 *     await enqueue(trx, 'emails', { to: 'ada@example.com', order: 42 }, { key: 'confirm-42', delay: 60 });
 *   });
 */
export async function enqueue(
  trx: Executor,
  queue: string,
  payload: unknown,
  options: EnqueueOptions = {},
): Promise<EnqueueResult> {
  const [result] = await enqueueMany(trx, [{ ...options, queue, payload }]);
  return result;
}

/**
 * Puts several jobs (on any queues) in `trx`'s transaction; results in the same order. All are
 * checked before any is sent.
 *
 * @example
 *   await client.query('BEGIN');
 *   await enqueueMany(client, [
 *     { queue: 'emails', payload: { order: 42 } },
 *     { queue: 'invoices', payload: { order: 42 }, priority: -1 },
 *   ]);
 *   await client.query('COMMIT');
 */
export async function enqueueMany(trx: Executor, jobs: readonly EnqueueInput[]): Promise<EnqueueResult[]> {
  const inputs: JobInput[] = jobs.map(({ queue, ...body }, i) =>
    toJobInput(queue, body, Number.POSITIVE_INFINITY, jobs.length === 1 ? 'job' : `jobs[${i}]`),
  );
  return inputs.length === 0 ? [] : withDb(trx, (db) => enqueueJobs(db, inputs));
}

function isKysely(x: Executor): x is Kysely<unknown> {
  return typeof (x as { executeQuery?: unknown }).executeQuery === 'function';
}

type Client = { query(...args: unknown[]): Promise<unknown> };

/**
 * Runs `fn` with a Kysely view of the caller's connection. A pg.Pool gets real transactions; a
 * client is already inside the caller's BEGIN, so the view's own BEGIN/COMMIT/ROLLBACK do nothing
 * (the caller's COMMIT decides, and after a thrown error the caller rolls back).
 */
async function withDb<T>(x: Executor, fn: (db: Db) => Promise<T>): Promise<T> {
  if (isKysely(x)) return fn(x as unknown as Db);
  if (typeof (x as { totalCount?: unknown }).totalCount === 'number') {
    const pool = x as unknown as PostgresPool;
    // `end` does nothing: the pool is the application's.
    const view = new Kysely({
      dialect: new PostgresDialect({ pool: { connect: () => pool.connect(), end: async () => {} } }),
    });
    return fn(view as unknown as Db);
  }
  const view = new Kysely({ dialect: new CallerTransactionDialect(x as Client) });
  return view.transaction().execute((trx) => fn(trx as unknown as Db));
}

class CallerTransactionDialect extends PostgresDialect {
  constructor(client: Client) {
    super({
      pool: {
        connect: async () => ({ query: client.query.bind(client), release: () => {} }) as never,
        end: async () => {},
      },
    });
  }

  override createDriver() {
    const driver = super.createDriver();
    driver.beginTransaction = async () => {};
    driver.commitTransaction = async () => {};
    driver.rollbackTransaction = async () => {};
    return driver;
  }
}
