/**
 * Start-up checks that the database URLs fit what runs on them, each failing with what to do:
 * - checkSessionUrl: the LISTEN connection's URL (DIRECT_DATABASE_URL, else DATABASE_URL) must be a
 *   session of its own. Behind a transaction-mode pool a LISTEN is registered on whichever server
 *   connection ran it and then lent to others, so the service would hear no other process's NOTIFY
 *   while /readyz said the listener was up (events would arrive only by the fallback poll). A
 *   connection hears its own NOTIFY even through a pool, so the check sends it from another one: a
 *   connection of the query pool.
 * - checkPreparedStatements: PREPARED_STATEMENTS=true on a transaction-mode pool needs a pooler that
 *   carries named statements across server connections (PgBouncer 1.21+ with max_prepared_statements);
 *   otherwise every hot read would fail with "prepared statement does not exist".
 * - explainStartupRefusal: a pooler that refuses the pools' startup parameters (PgBouncer's
 *   "unsupported startup parameter") is named as what it is.
 *
 * Both checks take well under a millisecond of database time; checkSessionUrl waits up to its bound
 * only when the NOTIFY is lost.
 */
import { randomBytes } from 'node:crypto';
import { sql, type Kysely } from 'kysely';
import pg from 'pg';
import type { Database } from './database.ts';

const CHANNEL = 'commitfeed_session_check';
/** How long the LISTEN connection may take to hear the check's NOTIFY. */
export const SESSION_CHECK_BOUND_MS = 3000;
/** What to do, in every message about a pool where a session was needed. */
const ADVICE =
  'keep DATABASE_URL on the pool and set DIRECT_DATABASE_URL to the PostgreSQL server itself ' +
  '(docs/operations.md, "Behind a connection pooler")';

/**
 * LISTENs on `sessionUrl` and NOTIFYs through `db` (a different connection) until heard, for at most
 * `boundMs`; throws naming the problem when nothing is heard.
 */
export async function checkSessionUrl(opts: {
  sessionUrl: string;
  db: Kysely<Database>;
  /** DIRECT_DATABASE_URL is set (the message names it). */
  pooled: boolean;
  boundMs?: number;
}): Promise<void> {
  const bound = opts.boundMs ?? SESSION_CHECK_BOUND_MS;
  const token = randomBytes(8).toString('hex');
  const client = new pg.Client({ connectionString: opts.sessionUrl, application_name: 'commitfeed-check' });
  client.on('error', () => {});
  let heard = false;
  client.on('notification', (m) => {
    if (m.channel === CHANNEL && m.payload === token) heard = true;
  });
  try {
    await client.connect();
    await client.query(`LISTEN ${CHANNEL}`);
    const notify = () =>
      sql`select pg_notify(${CHANNEL}, ${token})`.execute(opts.db).catch((err: unknown) => {
        throw explainStartupRefusal(err, 'DATABASE_URL');
      });
    await notify();
    // From the first NOTIFY's commit: a slow first connection through the pool is not a lost NOTIFY.
    const deadline = Date.now() + bound;
    // The LISTEN connection sends nothing while it waits: PostgreSQL delivers a notification to an
    // idle session by itself, while through a pool a query of its own could land on the server
    // connection that ran the LISTEN and pick up a notification by luck. The NOTIFY is sent again
    // now and then in case one was lost some other way (a connection failing over).
    for (let waited = 1; !heard && Date.now() < deadline; waited++) {
      await new Promise((r) => setTimeout(r, 25));
      if (!heard && waited % 10 === 0) await notify();
    }
  } finally {
    await client.end().catch(() => {});
  }
  if (heard) return;
  throw new Error(
    opts.pooled
      ? `DIRECT_DATABASE_URL is not a session of its own: a LISTEN on it did not hear, within ${bound} ms, a NOTIFY sent through DATABASE_URL. It looks like a transaction-mode pool (PgBouncer, RDS Proxy, Supavisor) or another database: set DIRECT_DATABASE_URL to the PostgreSQL server itself (its host and port, not the pooler's), on the same database as DATABASE_URL.`
      : `DATABASE_URL looks like a transaction-mode connection pool (PgBouncer, RDS Proxy, Supavisor): a LISTEN on it did not hear, within ${bound} ms, a NOTIFY sent from another of its connections, so this process would miss other processes' events (LISTEN, session advisory locks and session settings do not survive such a pool): ${ADVICE}.`,
  );
}

/** `err` rewritten to say what a startup parameter refusal means; other errors unchanged. */
export function explainStartupRefusal(err: unknown, which: 'DATABASE_URL' | 'DIRECT_DATABASE_URL'): unknown {
  const message = (err as Error)?.message ?? '';
  if (!/unsupported startup parameter/i.test(message)) return err;
  return new Error(
    which === 'DATABASE_URL'
      ? `DATABASE_URL refused a setting sent at connect (${message}): it is a connection pooler such as PgBouncer in transaction mode: ${ADVICE}.`
      : `DIRECT_DATABASE_URL refused a setting sent at connect (${message}): it is a connection pooler, not the PostgreSQL server itself: set DIRECT_DATABASE_URL to the server (its host and port, not the pooler's).`,
  );
}

/**
 * Checks that a named prepared statement made in one transaction of `pool` can be run in a later
 * one while the server connection that made it is busy elsewhere: another connection holds a
 * transaction open meanwhile, which a pool that lends the most recently freed server connection (as
 * PgBouncer does by default) gives that very one. Throws naming the setting when it cannot.
 */
export async function checkPreparedStatements(pool: pg.Pool): Promise<void> {
  const name = `commitfeed_check_${randomBytes(6).toString('hex')}`;
  const statement = { name, text: 'select pg_backend_pid() as pid', values: [] };
  const a = await pool.connect();
  const b = await pool.connect().catch((err: unknown) => {
    a.release();
    throw err;
  });
  let failed: unknown;
  try {
    await a.query(statement);
    await b.query('begin');
    try {
      await a.query(statement);
    } catch (err) {
      failed = err;
    } finally {
      await b.query('commit');
    }
    if (failed === undefined) await a.query(`deallocate ${name}`).catch(() => {});
  } finally {
    a.release(failed !== undefined);
    b.release();
  }
  if (failed === undefined) return;
  const e = failed as { code?: string; message?: string };
  if (e.code !== '26000' && !/prepared statement .* does not exist/i.test(e.message ?? '')) throw failed;
  throw new Error(
    `PREPARED_STATEMENTS=true, but a named prepared statement made in one transaction through DATABASE_URL was gone in the next (${e.message}): the pool does not carry prepared statements across its server connections (PgBouncer before 1.21, or max_prepared_statements = 0). Set PREPARED_STATEMENTS=auto (off behind a pool) or enable the pooler's prepared statement support.`,
  );
}
