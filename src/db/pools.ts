/**
 * The server's connection pools, from its settings: the primary's query pool (every write and the
 * reads that must see the primary), the tailer's own connection to the primary, and a pool per
 * streaming standby (READ_DATABASE_URL) for the feed's reads (src/feed/reads.ts).
 *
 * With DIRECT_DATABASE_URL, DATABASE_URL is a transaction-mode pool (PgBouncer, RDS Proxy, Supavisor):
 * the query pool goes through it with its settings set per transaction (src/db/pooled-client.ts) and
 * named prepared statements off unless PREPARED_STATEMENTS=true; whatever needs a session of its own
 * goes to DIRECT_DATABASE_URL: the LISTEN connection (`sessionUrl`), the tail read's connection, and
 * `sessionDb` (migrations and the janitor, which hold session advisory locks). Without it all of them
 * use DATABASE_URL, `sessionDb` being the query pool itself.
 *
 * Lifecycle: built by the server before anything else that needs the database; close() ends every
 * pool (a pool that fails to end is ignored: the process is stopping). pg connects lazily, so an
 * unreachable standby costs nothing here; the read layer finds out and reads from the primary.
 */
import type { Kysely } from 'kysely';
import type pg from 'pg';
import type { Config } from '../config/config.ts';
import { type Database, type DbOptions, createDatabase } from './database.ts';

export interface Pools {
  db: Kysely<Database>;
  /** The query pool under `db` (its gauges in /metrics). */
  pool: pg.Pool;
  /** Backend pids of `db`'s connections (the listener tells this process's commits by them). */
  sessions: ReadonlySet<number>;
  /** The tailer's reads on the primary, one at a time, planned generically (see genericPlans). */
  tailDb: Kysely<Database>;
  /** Sessions of their own on the primary (session advisory locks: migrations, the janitor). */
  sessionDb: Kysely<Database>;
  /** Where the LISTEN connection goes: DIRECT_DATABASE_URL, else DATABASE_URL. */
  sessionUrl: string;
  /** True when DATABASE_URL is a transaction-mode pool (DIRECT_DATABASE_URL is set). */
  pooled: boolean;
  /** One pool per standby, named host:port/database (no credentials) for logs and metrics. */
  standbys: { name: string; db: Kysely<Database> }[];
  close(): Promise<void>;
}

type PoolSettings = Pick<
  Config,
  'poolSize' | 'statementTimeoutMs' | 'preparedStatements' | 'readDatabaseUrls' | 'directDatabaseUrl'
>;

export function createPools(config: PoolSettings, url: string, log: DbOptions['log']): Pools {
  const direct = config.directDatabaseUrl;
  const pooled = direct !== undefined;
  const common = {
    poolSize: config.poolSize,
    statementTimeoutMs: config.statementTimeoutMs,
    preparedStatements: config.preparedStatements ?? true,
    log,
  };
  const { db, pool, sessions } = createDatabase({
    url,
    ...common,
    pooled,
    preparedStatements: config.preparedStatements ?? !pooled,
  });
  // Two: the janitor's pass and a migration (or `npm run maint`) may overlap.
  const sessionDb = pooled ? createDatabase({ url: direct, ...common, poolSize: 2 }).db : db;
  const standbys = config.readDatabaseUrls.map((standbyUrl, i, all) => ({
    // Two URLs of one server (e.g. different options) still get two names.
    name:
      all.findIndex((u) => standbyName(u) === standbyName(standbyUrl)) === i
        ? standbyName(standbyUrl)
        : `${standbyName(standbyUrl)}#${i + 1}`,
    db: createDatabase({ url: standbyUrl, ...common, applicationName: 'commitfeed-read', genericPlans: true })
      .db,
  }));
  // Named like the main pool's: it is the same service.
  const tailDb = createDatabase({ url: direct ?? url, ...common, poolSize: 1, genericPlans: true }).db;
  const all = [...new Set([db, sessionDb, tailDb, ...standbys.map((s) => s.db)])];
  return {
    db,
    pool,
    sessions,
    tailDb,
    sessionDb,
    sessionUrl: direct ?? url,
    pooled,
    standbys,
    close: async () => {
      await Promise.all(all.map((d) => d.destroy().catch(() => {})));
    },
  };
}

/** host:port/database of a connection URL: names a standby in logs and metrics without its password. */
function standbyName(url: string): string {
  try {
    const u = new URL(url);
    return `${u.host}${u.pathname}`;
  } catch {
    return 'standby';
  }
}
