/**
 * Settings of the process and its database: where it listens, how many workers serve the port, which
 * PostgreSQL (or the embedded one) and standbys it uses, and its pools.
 */
import {
  MAX_SETTING_MS,
  duration,
  int,
  optional,
  setting,
  splitList,
  text,
  type Env,
  type Setting,
} from './settings.ts';
import { availableParallelism } from 'node:os';

export const SERVER_SETTINGS = {
  port: int('PORT', 3000, 0, 'HTTP listen port (0: any free port).', 'HTTP'),
  host: text(
    'HOST',
    '127.0.0.1',
    'HTTP listen address; a non-loopback HOST requires access control (see AUTH).',
  ),
  workers: setting(
    'WORKERS',
    '1',
    'Processes serving PORT, each with its own batcher, tailer and SSE hub (`auto`: one per core). A crashed worker is restarted (at most 5 times a minute, then the server stops); see docs/operations.md#workers.',
    undefined,
    (raw) => {
      if (raw?.trim() === 'auto') return availableParallelism();
      const n = Number(raw);
      if (raw === undefined || !/^\s*\d+\s*$/.test(raw) || n < 1 || n > 256) {
        throw new Error(`WORKERS must be "auto" or an integer from 1 to 256 (got ${JSON.stringify(raw)})`);
      }
      return n;
    },
  ),
  databaseUrl: optional(
    'DATABASE_URL',
    'PostgreSQL to use, e.g. postgres://postgres@127.0.0.1:5432/postgres. Unset: an embedded PostgreSQL 17 is started with its data under DATA_DIR.',
    'Database',
  ),
  directDatabaseUrl: {
    name: 'DIRECT_DATABASE_URL',
    doc: 'The PostgreSQL server itself, when DATABASE_URL is a transaction-mode pooler (PgBouncer, RDS Proxy, Supavisor): LISTEN, the tail read, advisory locks (janitor, migrations) and `npm run maint` use it; requests use DATABASE_URL, which then gets no startup parameters (the statement timeout is set per transaction). A start-up check fails if a LISTEN here misses a NOTIFY sent through DATABASE_URL. Unset: everything uses DATABASE_URL (docs/operations.md#behind-a-connection-pooler).',
    parse: (raw: string | undefined, env: Env) => {
      if (raw !== undefined && !env.DATABASE_URL) {
        throw new Error(
          'DIRECT_DATABASE_URL is set without DATABASE_URL: set DATABASE_URL to the pool and DIRECT_DATABASE_URL to the PostgreSQL server itself',
        );
      }
      return raw;
    },
  },
  readDatabaseUrls: {
    name: 'READ_DATABASE_URL',
    doc: 'Streaming hot standbys of DATABASE_URL (comma-separated) for the tail, catch-up and JSON reads; writes, LISTEN, queues and the janitor stay on the primary. A standby that lags past READ_LAG_WAIT, stops, restarts or is promoted is left for the primary (logged, /readyz, /metrics) and rejoins when caught up; no event is lost or repeated. Unset: every read goes to the primary.',
    parse: (raw) => splitList(raw ?? ''),
  },
  readLagWaitMs: duration(
    'READ_LAG_WAIT',
    '1s',
    0,
    'Longest a read waits for a standby to replay the commit it must see (a wake, a read after a publish) before it reads the primary instead; the standby then serves no reads until it is less than a second behind.',
    { max: MAX_SETTING_MS },
  ),
  dataDir: text('DATA_DIR', '.data', 'Data folder of the embedded PostgreSQL (kept across restarts).'),
  embeddedPgPort: int('EMBEDDED_PG_PORT', 54329, 1, 'Port of the embedded PostgreSQL.'),
  poolSize: int(
    'POOL_SIZE',
    10,
    2,
    "Connections in the query pool (the LISTEN connection and the tail read's are two more; with DIRECT_DATABASE_URL, up to two more there for migrations and the janitor).",
  ),
  statementTimeoutMs: duration(
    'STATEMENT_TIMEOUT',
    '30s',
    100,
    'Longest a single SQL statement may run; a stalled database gives 503 instead of a hang.',
    { max: MAX_SETTING_MS },
  ),
  preparedStatements: setting(
    'PREPARED_STATEMENTS',
    'auto',
    'Run the hot feed queries as named prepared statements (planning a query over the partitioned feed costs more than running it). `auto`: on, but off on DATABASE_URL when DIRECT_DATABASE_URL is set (a transaction-mode pool); `true` there is checked at start (a named statement must survive from one pooled transaction to the next, as with PgBouncer 1.21+ and max_prepared_statements).',
    undefined,
    (raw): boolean | undefined => {
      const v = raw?.trim() ?? '';
      if (/^auto$/i.test(v)) return undefined;
      if (/^(1|true|yes|on)$/i.test(v)) return true;
      if (/^(0|false|no|off)$/i.test(v)) return false;
      throw new Error(`PREPARED_STATEMENTS must be auto, true or false (got ${JSON.stringify(raw)})`);
    },
  ),
  logLevel: text(
    'LOG_LEVEL',
    'info',
    'fatal, error, warn, info, debug (also logs every request), trace or silent.',
  ),
} satisfies Record<string, Setting<unknown>>;
