/**
 * What a lost connection means for a write. Most failures say for sure that nothing was stored: the
 * server could not be reached, the statement never left this process, or the server answered with an
 * error (its transaction rolled back). One does not: a connection lost while a statement that commits
 * is on its way, or its answer is. Such a statement is a COMMIT, or any statement sent outside a
 * transaction (autocommit: PostgreSQL commits it before it answers, as it does the group commit's
 * append on a direct connection). The server may have committed it: a transaction-mode pooler
 * restarted under load closes client connections while their server connections finish the COMMIT,
 * and a PostgreSQL killed by an immediate shutdown or a crash may have flushed the commit record of a
 * statement whose answer it never sent. Answering "unavailable, nothing stored" would be a lie that a
 * client retrying without an idempotency key turns into a duplicate.
 *
 * Such a statement fails with CommitUnknownError (SQLSTATE 08007, transaction_resolution_unknown):
 * still "unavailable" for every caller that retries or gives up, and answered 503 `commit_unknown`
 * over HTTP to a request that writes, which tells the client to retry with the same idempotency key
 * (`duplicate: true` means the first attempt was stored). The client cannot tell a read from a write
 * (the group commit's append is a `select` of a function), so an autocommit read that loses its
 * answer fails the same way; the HTTP layer answers `unavailable` to a GET, which stores nothing.
 * A write that runs a second statement after its first committed (an ack that then explains its
 * refusals, a claim after the acks that came with it) wraps the second in afterCommit(): if the
 * database goes away in between, the first is stored and only the answer is lost.
 *
 * Not unknown, and so still plainly unavailable: a statement that never left (the client's
 * connection had already failed), a server ERROR (statement_timeout's cancel included: the statement
 * and its implicit transaction rolled back), a statement inside a transaction (a backend that loses
 * its client inside a transaction rolls it back), and the BEGIN or ROLLBACK that opens or ends one.
 */
import type pg from 'pg';

/** A commit whose answer was lost with its connection: the write may or may not be stored. */
export class CommitUnknownError extends Error {
  readonly code = '08007';
  constructor(cause: unknown) {
    super(
      `the database connection was lost before a commit was confirmed: it may have been stored (${
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

/**
 * True when `err` ended the connection rather than the statement: the answer may have been lost after
 * the commit. A server ERROR ends only the statement; of the codes isUnavailable knows, 57014
 * (statement_timeout, a cancel) is the one sent as an ERROR.
 */
function answerLost(err: unknown): boolean {
  return isUnavailable(err) && (err as { code?: unknown }).code !== '57014';
}

/**
 * Runs `next`, a statement after a write of the same request committed: if the database is
 * unavailable now, the write is stored and only the answer is lost, so the failure is a
 * CommitUnknownError, never "nothing stored".
 *
 * @example
 *   const acked = await ackJobs(db, items);
 *   const jobs = await afterCommit(() => claimJobs(db, queue, max));
 */
export async function afterCommit<T>(next: () => Promise<T>): Promise<T> {
  try {
    return await next();
  } catch (err) {
    throw isUnavailable(err) && !(err instanceof CommitUnknownError) ? new CommitUnknownError(err) : err;
  }
}

const COMMIT = /^\s*(commit|end)\s*(transaction|work)?\s*;?\s*$/i;
/** Statements that commit nothing, sent outside a transaction: its start, or a stray end. */
const NO_COMMIT = /^\s*(begin|start\s+transaction|rollback|abort)\b/i;

/** The pg.Client internals read here: PostgreSQL's last ReadyForQuery status, the query on the wire. */
interface ClientState {
  _txStatus: string | null;
  _activeQuery: unknown;
}

/**
 * A pg.Client class over `Base` whose statements that commit (a COMMIT, or any statement sent outside
 * a transaction) fail with CommitUnknownError when their connection is lost after they were sent.
 */
export function commitOutcomeClass(Base: typeof pg.Client): typeof pg.Client {
  return class CommitOutcomeClient extends Base {
    // biome-ignore lint/suspicious/noExplicitAny: pg's query() has many overloads; this passes them through
    override query(config: any, values?: any, callback?: any): any {
      const state = this as unknown as ClientState;
      const text: unknown = typeof config === 'string' ? config : config?.text;
      const commits =
        typeof text === 'string' && (COMMIT.test(text) || (state._txStatus === 'I' && !NO_COMMIT.test(text)));
      // biome-ignore lint/suspicious/noExplicitAny: the overloads' result (a promise for these callers)
      const result: any = super.query(config, values, callback);
      if (!commits || typeof result?.then !== 'function') return result;
      // A client whose connection had already failed refuses the query without sending it; a query
      // queued behind another (none of commitfeed's callers do that) may be sent later: unknown too.
      if (state._activeQuery == null) return result;
      return result.catch((err: unknown) => {
        throw answerLost(err) ? new CommitUnknownError(err) : err;
      });
    }
  };
}
