/**
 * What a lost connection means for a write. Most failures say for sure that nothing was stored: the
 * server could not be reached, or it aborted the transaction before its COMMIT arrived (a backend
 * that loses its client inside a transaction rolls it back). One does not: a connection lost while a
 * COMMIT is on its way or its answer is. The server may have committed (a transaction-mode pooler
 * restarted under load does exactly this: it closes client connections while their server
 * connections finish the COMMIT), so answering "unavailable, nothing stored" would be a lie that a
 * client retrying without an idempotency key turns into a duplicate.
 *
 * Such a COMMIT fails with CommitUnknownError (SQLSTATE 08007, transaction_resolution_unknown): still
 * "unavailable" for every caller that retries or gives up, and answered 503 `commit_unknown` over
 * HTTP, which tells the client to retry with the same idempotency key (`duplicate: true` means the
 * first attempt was stored).
 *
 * Covered: every explicit COMMIT (Kysely's transactions) on every pool, and the COMMIT the pooled
 * client adds around a statement outside a transaction (src/db/pooled-client.ts: the group commit's
 * writes behind a pooler). Not covered: a single autocommit statement on a direct connection, whose
 * commit is part of the statement; the server aborts it when it ends the connection itself (restart,
 * pg_terminate_backend), and only a connection lost in the instant between its commit and its answer
 * leaves it unknown.
 */
import type pg from 'pg';

/** A COMMIT whose answer was lost with its connection: the transaction may or may not be stored. */
export class CommitUnknownError extends Error {
  readonly code = '08007';
  constructor(cause: unknown) {
    super(
      `the database connection was lost while a COMMIT was in flight: it may have been stored (${
        cause instanceof Error ? cause.message : String(cause)
      })`,
      { cause },
    );
  }
}

/** True for errors that mean "the database is unreachable or going away" (answer 503, retry later). */
export function isUnavailable(err: unknown): boolean {
  if (!err || typeof err !== 'object') return false;
  const e = err as { code?: unknown; message?: unknown };
  const code = typeof e.code === 'string' ? e.code : '';
  const message = typeof e.message === 'string' ? e.message : '';
  return (
    code.startsWith('08') || // connection exception (08007: CommitUnknownError)
    code === '57P01' || // admin_shutdown
    code === '57P02' || // crash_shutdown
    code === '57P03' || // cannot_connect_now (starting up / shutting down)
    code === '57014' || // query_canceled (statement_timeout)
    code === '53300' || // too_many_connections
    code === 'ECONNREFUSED' ||
    code === 'ECONNRESET' ||
    code === 'ENOTFOUND' ||
    code === 'ETIMEDOUT' ||
    code === 'EPIPE' ||
    /Connection terminated|connection timeout|timeout exceeded when trying to connect|Client has encountered a connection error|Connection ended/i.test(
      message,
    )
  );
}

const COMMIT = /^\s*(commit|end)\s*(transaction|work)?\s*;?\s*$/i;

/** A pg.Client class over `Base` whose COMMIT fails with CommitUnknownError when its connection is lost. */
export function commitOutcomeClass(Base: typeof pg.Client): typeof pg.Client {
  return class CommitOutcomeClient extends Base {
    // biome-ignore lint/suspicious/noExplicitAny: pg's query() has many overloads; this passes them through
    override query(config: any, values?: any, callback?: any): any {
      // biome-ignore lint/suspicious/noExplicitAny: the overloads' result (a promise for these callers)
      const result: any = super.query(config, values, callback);
      const text: unknown = typeof config === 'string' ? config : config?.text;
      if (typeof text !== 'string' || !COMMIT.test(text) || typeof result?.then !== 'function') return result;
      return result.catch((err: unknown) => {
        throw isUnavailable(err) ? new CommitUnknownError(err) : err;
      });
    }
  };
}
