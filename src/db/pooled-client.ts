/**
 * Connections to a transaction-mode pool (DATABASE_URL when DIRECT_DATABASE_URL is set: PgBouncer,
 * RDS Proxy, Supavisor). Such a pool lends a server connection for one transaction at a time, so no
 * session state survives: startup parameters are refused (PgBouncer 1.18: "unsupported startup
 * parameter: statement_timeout") or would reach one server connection only, and a plain SET would
 * leak into other clients' transactions. So these connections send no startup parameter, and the
 * settings every other pool sends at connect (statement_timeout, jit=off) are set with SET LOCAL in
 * each transaction:
 * - a transaction's BEGIN (Kysely's `begin` / `start transaction ...`) is sent as one simple query
 *   with the SET LOCALs: no extra round trip;
 * - a statement run outside a transaction (an autocommit read, the self-check marker, ...) is
 *   wrapped in BEGIN + SET LOCAL ... COMMIT (ROLLBACK when it fails): two more round trips, and
 *   no call site can forget it.
 * Waiting for the pool to lend a server connection is bounded too: a BEGIN that has not come back
 * within the statement timeout closes the connection (the request gets a 503, pg.Pool opens a new
 * one), so an exhausted or stalled pool never hangs a request.
 *
 * Lifecycle: one per pooled connection, made by pg.Pool (its `Client`); it uses the connection one
 * query at a time, as pg.Pool's and Kysely's callers do. Whether a transaction is open comes from
 * PostgreSQL's own ReadyForQuery status, which pg keeps in `_txStatus`.
 */
import type pg from 'pg';

/** The settings of one transaction on a pooled connection, as one simple-protocol text. */
export function transactionSettings(opts: { statementTimeoutMs: number }): string {
  // JIT: see createDatabase (a 1,000-row catch-up page spent 85 of its 88 ms compiling).
  return `set local statement_timeout = ${Math.max(0, Math.floor(opts.statementTimeoutMs))}; set local jit = off`;
}

const BEGIN = /^\s*(begin|start\s+transaction)\b/i;
const ENDS = /^\s*(commit|rollback|end|abort)\b/i;

type Query = (config: unknown, values?: unknown, callback?: unknown) => unknown;

/**
 * A pg.Client class (over `Base`: pg.Client, or PreparingClient for named statements) that applies
 * `settings` to every transaction, closing the connection when a BEGIN waits longer than `boundMs`.
 */
export function pooledClientClass(
  Base: typeof pg.Client,
  settings: string,
  boundMs: number,
): typeof pg.Client {
  return class PooledClient extends Base {
    // biome-ignore lint/suspicious/noExplicitAny: pg's query() has many overloads; this passes them through
    override query(config: any, values?: any, callback?: any): any {
      const text: unknown = typeof config === 'string' ? config : config?.text;
      // Callback and Submittable forms: none of commitfeed's callers use them; passed through.
      if (typeof text !== 'string' || typeof values === 'function' || callback !== undefined) {
        return super.query(config, values, callback);
      }
      if (BEGIN.test(text) && (values === undefined || values.length === 0) && typeof config === 'string') {
        return this.begin(text);
      }
      const status = (this as unknown as { _txStatus: string | null })._txStatus;
      if (status !== 'I' || ENDS.test(text)) return super.query(config, values);
      return this.autocommit(config, values);
    }

    /** `text` (a BEGIN) and the settings in one simple query; resolves with the BEGIN's result. */
    private async begin(text: string): Promise<pg.QueryResult> {
      const superQuery = super.query.bind(this) as Query;
      const timer = setTimeout(() => {
        // ETIMEDOUT: a connection failure (isUnavailable), answered 503 like any other.
        const err = Object.assign(
          new Error(`the connection pool lent no server connection within ${boundMs} ms`),
          { code: 'ETIMEDOUT' },
        );
        (
          this as unknown as { connection: { stream: { destroy(err?: Error): void } } }
        ).connection.stream.destroy(err);
      }, boundMs);
      try {
        const results = (await superQuery(`${text}; ${settings}`)) as pg.QueryResult[];
        return results[0];
      } finally {
        clearTimeout(timer);
      }
    }

    private async autocommit(config: unknown, values: unknown): Promise<unknown> {
      const superQuery = super.query.bind(this) as Query;
      await this.begin('begin');
      let result: unknown;
      try {
        result = await superQuery(config, values);
      } catch (err) {
        // A connection that died is replaced by the pool; its error is the one to report.
        await (superQuery('rollback') as Promise<unknown>).catch(() => {});
        throw err;
      }
      await superQuery('commit');
      return result;
    }
  };
}
