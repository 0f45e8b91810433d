/**
 * The Kysely instance over a node-postgres pool.
 *
 * node-postgres emits `error` on a pooled client whose connection dies while idle or checked out
 * (pg_terminate_backend, a PostgreSQL restart); an unheard `error` event exits Node. We listen on the
 * pool and on every client it creates, log, and let the pool replace the connection: the query in
 * flight fails (the HTTP layer answers 503) and the next one reconnects.
 */
import { Kysely, PostgresDialect, type Transaction } from 'kysely';
import pg from 'pg';
import { commitOutcomeClass } from './commit-outcome.ts';
import { pooledClientClass, transactionSettings } from './pooled-client.ts';
import { PreparingClient } from './prepared.ts';

export const SCHEMA = 'commitfeed';

/**
 * No table is described to Kysely: commitfeed's statements are SQL text (prepared statements, the
 * functions of src/sql/), so the feed's columns are said once, in src/feed/event.ts.
 */
// biome-ignore lint/complexity/noBannedTypes: an empty schema (Kysely needs one)
export type Database = {};

/** Either the pool-backed instance or a transaction: query functions accept both. */
export type Db = Kysely<Database> | Transaction<Database>;

export interface Logger {
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

export interface DbOptions {
  url: string;
  poolSize: number;
  statementTimeoutMs: number;
  log: Logger;
  applicationName?: string;
  /** Run the hot queries as named prepared statements (src/db/prepared.ts); default true. */
  preparedStatements?: boolean;
  /** Plan every parameterised statement generically (plan_cache_mode): for pools that run only the
   * feed's reads, whose generic plans test/retention.test.ts keeps to index scans. */
  genericPlans?: boolean;
  /** A transaction-mode pool (PgBouncer, RDS Proxy, Supavisor): no startup parameters, the settings
   * set per transaction (src/db/pooled-client.ts), and no backend pids in `sessions` (the pool's
   * key data names no server process). */
  pooled?: boolean;
}

/**
 * `sessions`: backend pids of the pool's open connections. The listener uses it to tell this process's
 * own commits (which poke the tailer directly) from other processes' (which it must hear).
 */
export function createDatabase(opts: DbOptions): {
  db: Kysely<Database>;
  pool: pg.Pool;
  sessions: ReadonlySet<number>;
} {
  const pool = new pg.Pool({
    connectionString: opts.url,
    max: opts.poolSize,
    connectionTimeoutMillis: 5000,
    idleTimeoutMillis: 30000,
    ...(opts.pooled ? pooledClient(opts) : sessionClient(opts)),
  });
  pool.on('error', (err) => opts.log.warn({ err: err.message }, 'idle database connection failed'));
  const sessions = new Set<number>();
  pool.on('connect', (client) => {
    client.on('error', (err) => opts.log.warn({ err: err.message }, 'database connection failed'));
    if (!opts.pooled) sessions.add(pidOf(client));
  });
  pool.on('remove', (client) => sessions.delete(pidOf(client)));
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  return { db, pool, sessions };
}

/** A pooled connection: no startup parameter at all (the pooler may refuse any). */
function pooledClient(opts: DbOptions): pg.PoolConfig {
  const base = commitOutcomeClass(opts.preparedStatements === false ? pg.Client : PreparingClient);
  return { Client: pooledClientClass(base, transactionSettings(opts), opts.statementTimeoutMs) };
}

/** A connection of its own to the server: its settings sent once, at connect. */
function sessionClient(opts: DbOptions): pg.PoolConfig {
  const Base = opts.preparedStatements === false ? pg.Client : PreparingClient;
  return {
    // The feed-read pools (genericPlans) only read: a lost answer there stored nothing, so they skip
    // the commit-outcome check each statement would otherwise pay (commit-outcome.ts).
    Client: opts.genericPlans ? Base : commitOutcomeClass(Base),
    statement_timeout: opts.statementTimeoutMs,
    application_name: opts.applicationName ?? 'commitfeed',
    // JIT compiles a plan when its cost estimate is high, which partitioned feed reads (many
    // partitions, a one-row trim_mark the planner guesses at 1,330 rows) reach easily: measured on
    // PostgreSQL 15, a 1,000-row catch-up page took 88 ms with JIT (85 ms of it compiling) and 6.6 ms
    // without. Our queries are short index scans; JIT never pays for itself here.
    // force_generic_plan (feed-read pools only): on a fresh feed PostgreSQL finds the tail read's
    // custom plans cheaper than its generic one and plans it again on every run, 570–720 µs of its
    // CPU per read against ~100 µs with the generic plan (bench/HISTORY.md, "The tail read against
    // the number of partitions"). The setting covers the pool's unnamed statements too, so it is not
    // set on the pool that runs everything else.
    options: opts.genericPlans ? '-c jit=off -c plan_cache_mode=force_generic_plan' : '-c jit=off',
  };
}

/** The backend pid pg learnt at connect (BackendKeyData); not in pg's type declarations. */
function pidOf(client: pg.PoolClient): number {
  return (client as unknown as { processID: number }).processID;
}

/** Runs `fn` in `db`'s transaction, or in a new one when `db` is the pool. */
export function inTransaction<T>(db: Db, fn: (trx: Db) => Promise<T>): Promise<T> {
  return db.isTransaction ? fn(db) : db.transaction().execute(fn);
}
