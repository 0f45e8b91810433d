/**
 * Typed configuration from the environment. Every setting and its default is documented in
 * `.env.example`; a `.env` file in the working directory is read first if present (real environment
 * variables win over it).
 */
import { existsSync, readFileSync } from 'node:fs';

export interface Config {
  port: number;
  host: string;
  /** Unset: start the embedded PostgreSQL under `dataDir`. */
  databaseUrl: string | undefined;
  dataDir: string;
  embeddedPgPort: number;
  poolSize: number;
  logLevel: string;
  /** Largest request body accepted, in bytes. */
  maxBodyBytes: number;
  /** Largest single event `data` (as JSON text), in bytes. */
  maxEventBytes: number;
  /** Most events gathered into one group-commit transaction. */
  batchMaxEvents: number;
  /** Events kept in the tailer's in-memory window. */
  windowEvents: number;
  /** Rows per tail / catch-up query. */
  pageSize: number;
  /** Fallback poll when no notification arrives, in ms. */
  pollIntervalMs: number;
  /** How long a `latest` start or a read-your-writes read waits for the horizon to pass committed
   * rows (an open transaction holding it back) before answering 503, in ms. */
  startWaitMs: number;
  /** SSE comment heartbeat interval, in ms. */
  heartbeatMs: number;
  /** Reconnection delay suggested to SSE clients (`retry:`), in ms. */
  sseRetryMs: number;
  /** Bound on one SQL statement, in ms (a stalled database gives 503, not a hang). */
  statementTimeoutMs: number;
  preparedStatements: boolean;
  /** Most SSE connections one process serves; more get 503 with Retry-After before the stream starts. */
  maxSseConnections: number;
  /** An SSE subscriber whose socket has taken no bytes for this long is dropped (it resumes by id), in ms. */
  slowSubscriberMaxMs: number;
  /** `AUTH`: 'jwt' requires tokens, 'off' allows everything; unset: jwt when a key is configured, else
   * off on a loopback HOST only (a non-loopback HOST without keys refuses to start). See src/auth. */
  auth: 'off' | 'jwt' | undefined;
  /** HS256 secret (at least 32 bytes). */
  jwtSecret: string | undefined;
  /** PEM public key text (RS256 / ES256 / ES384 / EdDSA), from JWT_PUBLIC_KEY or JWT_PUBLIC_KEY_FILE. */
  jwtPublicKey: string | undefined;
  /** Path of a local JWKS file (public keys, selected by `kid`). */
  jwksFile: string | undefined;
  /** When set, tokens must carry this `iss` / `aud`. */
  jwtIssuer: string | undefined;
  jwtAudience: string | undefined;
  /** Browser origins allowed by CORS (exact, e.g. https://app.example.com), or ['*'] (no credentials). */
  corsOrigins: string[];
  /** Most SSE connections open at once with one token; more get 429 `too_many_connections`. */
  maxSsePerToken: number;
  /** /metrics needs a token with `admin: true` (when auth is on). */
  metricsRequireAdmin: boolean;
  /** Feed events (and dead queue jobs) older than this are dropped by the janitor, in ms. */
  retentionMs: number;
  /** Time span of one feed partition, in ms (the unit in which history is dropped). */
  partitionIntervalMs: number;
  /** Partitions kept created ahead of the clock (inserts never wait for a partition to be made). */
  partitionPremake: number;
  /** How long an idempotency key keeps deduplicating after its event was appended, in ms. */
  dedupWindowMs: number;
  /** How often the janitor runs, in ms; 0 disables it in this process (run `npm run maint -- run`). */
  janitorIntervalMs: number;
  /** Longest the janitor waits for a table lock before giving up until its next run, in ms. */
  janitorLockTimeoutMs: number;
}

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** A duration: `7d`, `12h`, `30m`, `45s`, `500ms`, or a bare number of milliseconds. */
export function parseDuration(text: string): number | undefined {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$/.exec(text);
  if (!m) return undefined;
  const ms = Number(m[1]) * UNITS[m[2] ?? 'ms'];
  return Number.isFinite(ms) ? Math.round(ms) : undefined;
}

function duration(env: NodeJS.ProcessEnv, name: string, dflt: string, minMs: number): number {
  const raw = env[name] || dflt;
  const ms = parseDuration(raw);
  if (ms === undefined || ms < minMs) {
    throw new Error(
      `${name} must be a duration such as 7d, 12h, 30m, 45s or 500ms, at least ${minMs} ms (got ${JSON.stringify(raw)})`,
    );
  }
  return ms;
}

function int(env: NodeJS.ProcessEnv, name: string, dflt: number, min = 0): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return dflt;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min) {
    throw new Error(`${name} must be an integer >= ${min} (got ${JSON.stringify(raw)})`);
  }
  return n;
}

function bool(env: NodeJS.ProcessEnv, name: string, dflt: boolean): boolean {
  const raw = env[name];
  if (raw === undefined || raw === '') return dflt;
  if (/^(1|true|yes|on)$/i.test(raw)) return true;
  if (/^(0|false|no|off)$/i.test(raw)) return false;
  throw new Error(`${name} must be true or false (got ${JSON.stringify(raw)})`);
}

function authMode(raw: string | undefined): 'off' | 'jwt' | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (raw === 'off' || raw === 'jwt') return raw;
  throw new Error(`AUTH must be "off" or "jwt" (got ${JSON.stringify(raw)})`);
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  return {
    port: int(env, 'PORT', 3000),
    host: env.HOST || '127.0.0.1',
    databaseUrl: env.DATABASE_URL || undefined,
    dataDir: env.DATA_DIR || '.data',
    embeddedPgPort: int(env, 'EMBEDDED_PG_PORT', 54329, 1),
    poolSize: int(env, 'POOL_SIZE', 10, 2),
    logLevel: env.LOG_LEVEL || 'info',
    maxBodyBytes: int(env, 'MAX_BODY_BYTES', 1024 * 1024, 1024),
    maxEventBytes: int(env, 'MAX_EVENT_BYTES', 1024 * 1024, 16),
    batchMaxEvents: int(env, 'BATCH_MAX_EVENTS', 2000, 1),
    windowEvents: int(env, 'WINDOW_EVENTS', 10000, 100),
    pageSize: int(env, 'PAGE_SIZE', 1000, 10),
    pollIntervalMs: int(env, 'POLL_INTERVAL_MS', 1000, 10),
    startWaitMs: int(env, 'START_WAIT_MS', 5000, 0),
    heartbeatMs: int(env, 'HEARTBEAT_MS', 15000, 100),
    sseRetryMs: int(env, 'SSE_RETRY_MS', 2000, 0),
    statementTimeoutMs: int(env, 'STATEMENT_TIMEOUT_MS', 30000, 100),
    preparedStatements: bool(env, 'PREPARED_STATEMENTS', true),
    maxSseConnections: int(env, 'MAX_SSE_CONNECTIONS', 20000, 1),
    slowSubscriberMaxMs: int(env, 'SLOW_SUBSCRIBER_MAX_MS', 30000, 100),
    auth: authMode(env.AUTH),
    jwtSecret: env.JWT_SECRET || undefined,
    jwtPublicKey:
      env.JWT_PUBLIC_KEY ||
      (env.JWT_PUBLIC_KEY_FILE ? readFileSync(env.JWT_PUBLIC_KEY_FILE, 'utf8') : undefined),
    jwksFile: env.JWKS_FILE || undefined,
    jwtIssuer: env.JWT_ISSUER || undefined,
    jwtAudience: env.JWT_AUDIENCE || undefined,
    corsOrigins: (env.CORS_ORIGINS ?? '')
      .split(',')
      .map((o) => o.trim())
      .filter((o) => o !== ''),
    maxSsePerToken: int(env, 'MAX_SSE_PER_TOKEN', 100, 1),
    metricsRequireAdmin: bool(env, 'METRICS_REQUIRE_ADMIN', false),
    retentionMs: duration(env, 'RETENTION', '7d', 1000),
    partitionIntervalMs: duration(env, 'PARTITION_INTERVAL', '1d', 1000),
    partitionPremake: int(env, 'PARTITION_PREMAKE', 3, 1),
    dedupWindowMs: duration(env, 'DEDUP_WINDOW', '7d', 1000),
    janitorIntervalMs: duration(env, 'JANITOR_INTERVAL', '5m', 0),
    janitorLockTimeoutMs: int(env, 'JANITOR_LOCK_TIMEOUT_MS', 1000, 10),
  };
}

/** Reads `.env` into process.env (without overriding variables already set). */
export function loadDotEnv(file = '.env'): void {
  if (existsSync(file)) process.loadEnvFile(file);
}
