/**
 * Typed configuration from the environment, defined once: `SETTINGS` below names every variable, its
 * default, how it is parsed and what it means, and loadConfig reads exactly that table. `.env.example`
 * and `docs/configuration.md` list the same variables with the same defaults (test/config.test.ts
 * compares them with this table; `npx tsx src/cli/config-docs.ts` prints both from it).
 *
 * A `.env` file in the working directory is read first if present (real environment variables win
 * over it). A bad value stops start-up with an error naming the variable and what it accepts.
 * Durations are written with a unit (`250ms`, `5s`, `30m`, `12h`, `7d`); the field names of Config
 * keep the `Ms` suffix because the code works in milliseconds.
 */
import { existsSync, readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';

export interface Config {
  port: number;
  host: string;
  /** Processes serving the port (node:cluster; `auto`: one per core). 1: no cluster. See src/cluster. */
  workers: number;
  /** Unset: start the embedded PostgreSQL under `dataDir`. */
  databaseUrl: string | undefined;
  /** Streaming hot standbys for feed reads (READ_DATABASE_URL, comma-separated); empty: the primary. */
  readDatabaseUrls: string[];
  /** How long a read waits for a standby to replay what it needs before reading the primary, in ms. */
  readLagWaitMs: number;
  dataDir: string;
  embeddedPgPort: number;
  poolSize: number;
  logLevel: string;
  /** Largest request body accepted, in bytes. */
  maxBodyBytes: number;
  /** Largest single event `data` (as JSON text), in bytes. */
  maxEventBytes: number;
  /** Largest job result stored with an ack, in bytes. */
  maxJobResultBytes: number;
  /** Most events gathered into one group-commit transaction. */
  batchMaxEvents: number;
  /** Events kept in the tailer's in-memory window. */
  windowEvents: number;
  /** Rows per tail / catch-up query. */
  pageSize: number;
  /** Fallback poll when no notification arrives, in ms. */
  pollIntervalMs: number;
  /** How long the tailer may defer reading a commit while nothing in the process waits for events, in ms. */
  idleReadDelayMs: number;
  /** How far the tail read's floor trails the time it proved (0: no floor), in ms. */
  tailFloorMarginMs: number;
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
  /** Completed and cancelled queue jobs stay readable this long, in ms. */
  jobRetentionMs: number;
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
  /** Run the stream-subscription follower and the cron scheduler in this process. */
  flows: boolean;
  /** A schedule tick enqueued more than this after its time counts as missed (catch-up policy), in ms. */
  scheduleLateAfterMs: number;
  /** Issuers trusted for Mercure hub tokens, each bound to its keys (src/mercure/issuers.ts). */
  mercureIssuers: MercureIssuerConfig[];
  /** The hub's resource identifier: the `aud` its tokens must carry (never derived from a request). */
  mercureResource: string | undefined;
  /** Signature algorithms the hub accepts (with each key still pinned to its own). */
  mercureAlgorithms: string[];
  /** Subscribers without a token may receive public (not private) updates. */
  mercureAnonymous: boolean;
  /** Cookie the hub also reads the token from (when there is no Authorization header). */
  mercureCookie: string;
  /** Origins allowed to publish with the cookie (CSRF); empty: cookie publishes are refused. */
  mercurePublishOrigins: string[];
  /** Active subscriptions: events on the hub's reserved topics and the subscriptions API. */
  mercureSubscriptions: boolean;
  /** How long an instance's subscriptions outlive it when it dies without closing them, in ms. */
  mercureInstanceLeaseMs: number;
}

/** One trusted issuer of Mercure tokens and one source of its keys (MERCURE_ISSUERS). */
export interface MercureIssuerConfig {
  /** Compared with the token's `iss` exactly. */
  iss: string;
  /** HS256 secret, at least 32 bytes. */
  secret?: string;
  /** PEM public key, inline or in a file. */
  publicKey?: string;
  publicKeyFile?: string;
  /** A local JSON Web Key Set of public keys. */
  jwksFile?: string;
  /** Tokens verified by this key may only publish, or only subscribe (separate keys per role). */
  role?: 'publish' | 'subscribe';
}

type Env = NodeJS.ProcessEnv;

/** One environment variable: the single place its name, default and meaning are written. */
export interface Setting<T> {
  name: string;
  /** The default as it would be written in `.env`; undefined: unset unless given. */
  default?: string;
  /** One or two sentences for `.env.example` and docs/configuration.md. */
  doc: string;
  /** A heading that starts a group of related variables (in `.env.example` and the docs). */
  section?: string;
  /** Reads the value (`raw` is the variable, or the default when it is unset or empty). */
  parse(raw: string | undefined, env: Env): T;
}

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** 24 days: within what a Node.js timer and PostgreSQL's statement_timeout hold (2^31 - 1 ms). */
const MAX_TIMER_MS = 24 * 86_400_000;

/**
 * A duration with its unit: `7d`, `12h`, `30m`, `45s`, `250ms`, `1.5s`; `0` alone needs none.
 * Returns milliseconds, or undefined when the text is not a duration.
 */
export function parseDuration(text: string): number | undefined {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$/.exec(text);
  if (!m) return undefined;
  if (m[2] === undefined && Number(m[1]) !== 0) return undefined;
  const ms = Number(m[1]) * UNITS[m[2] ?? 'ms'];
  return Number.isFinite(ms) ? Math.round(ms) : undefined;
}

function formatMs(ms: number): string {
  for (const [unit, size] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1000],
  ] as const) {
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}

function duration(
  name: string,
  dflt: string,
  min: number,
  doc: string,
  extra: { section?: string; max?: number } = {},
): Setting<number> {
  const max = extra.max ?? Number.POSITIVE_INFINITY;
  return {
    name,
    default: dflt,
    doc,
    section: extra.section,
    parse(raw) {
      const ms = parseDuration(raw ?? '');
      if (ms === undefined || ms < min || ms > max) {
        const range =
          max === Number.POSITIVE_INFINITY
            ? `at least ${formatMs(min)}`
            : `${formatMs(min)} to ${formatMs(max)}`;
        throw new Error(
          `${name} must be a duration with a unit, such as 250ms, 5s, 30m, 12h or 7d, ${range} (got ${JSON.stringify(raw)})`,
        );
      }
      return ms;
    },
  };
}

/** A setting whose default is written as its variable would be. */
function setting<T>(
  name: string,
  dflt: string,
  doc: string,
  section: string | undefined,
  parse: (raw: string | undefined) => T,
): Setting<T> {
  return { name, default: dflt, doc, section, parse };
}

function int(name: string, dflt: number, min: number, doc: string, section?: string): Setting<number> {
  return setting(name, String(dflt), doc, section, (raw) => {
    const n = Number(raw);
    if (raw === undefined || !/^\s*\d+\s*$/.test(raw) || !Number.isSafeInteger(n) || n < min) {
      throw new Error(`${name} must be an integer >= ${min} (got ${JSON.stringify(raw)})`);
    }
    return n;
  });
}

function bool(name: string, dflt: boolean, doc: string, section?: string): Setting<boolean> {
  return setting(name, String(dflt), doc, section, (raw) => {
    if (raw !== undefined && /^(1|true|yes|on)$/i.test(raw)) return true;
    if (raw !== undefined && /^(0|false|no|off)$/i.test(raw)) return false;
    throw new Error(`${name} must be true or false (got ${JSON.stringify(raw)})`);
  });
}

function text(name: string, dflt: string, doc: string, section?: string): Setting<string> {
  return { name, default: dflt, doc, section, parse: (raw) => raw ?? dflt };
}

function optional(name: string, doc: string, section?: string): Setting<string | undefined> {
  return { name, doc, section, parse: (raw) => raw };
}

/** A comma-separated list of exact origins (scheme://host[:port]); throws naming the setting. */
export function parseOrigins(name: string, raw: string): string[] {
  const list = raw
    .split(',')
    .map((o) => o.trim())
    .filter((o) => o !== '');
  for (const o of list) {
    let ok = false;
    try {
      ok = new URL(o).origin === o;
    } catch {
      // reported below
    }
    if (!ok)
      throw new Error(
        `${name}: ${JSON.stringify(o)} is not an origin (scheme://host[:port], no path or trailing slash)`,
      );
  }
  return list;
}

const ISSUER_KEYS = ['secret', 'publicKey', 'publicKeyFile', 'jwksFile'] as const;

/** MERCURE_ISSUERS: a JSON list of issuers, each with exactly one key source. */
function parseMercureIssuers(raw: string): MercureIssuerConfig[] {
  const fail = (why: string): never => {
    throw new Error(`MERCURE_ISSUERS ${why}`);
  };
  let list: unknown;
  try {
    list = JSON.parse(raw);
  } catch {
    fail('must be JSON: [{"iss": "...", "secret": "..."}]');
  }
  if (!Array.isArray(list)) return fail('must be a JSON list of issuers');
  return list.map((e: unknown, i) => {
    if (typeof e !== 'object' || e === null || Array.isArray(e)) return fail(`[${i}] must be an object`);
    const entry = e as Record<string, unknown>;
    for (const k of Object.keys(entry)) {
      if (!['iss', 'role', ...ISSUER_KEYS].includes(k)) fail(`[${i}]: unknown member ${JSON.stringify(k)}`);
    }
    if (typeof entry.iss !== 'string' || entry.iss === '') fail(`[${i}].iss must be a non-empty string`);
    const sources = ISSUER_KEYS.filter((k) => entry[k] !== undefined);
    if (sources.length !== 1) fail(`[${i}] needs exactly one of ${ISSUER_KEYS.join(', ')}`);
    if (typeof entry[sources[0]] !== 'string' || entry[sources[0]] === '')
      fail(`[${i}].${sources[0]} must be a non-empty string`);
    if (entry.role !== undefined && entry.role !== 'publish' && entry.role !== 'subscribe') {
      fail(`[${i}].role must be "publish" or "subscribe"`);
    }
    return entry as unknown as MercureIssuerConfig;
  });
}

/**
 * Every variable loadConfig reads, keyed by the Config field it fills, in the order they are
 * documented. The mapped type makes a new Config field fail to compile until it has its variable.
 */
export const SETTINGS: { [K in keyof Config]: Setting<Config[K]> } = {
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
  readDatabaseUrls: {
    name: 'READ_DATABASE_URL',
    doc: 'Streaming hot standbys of DATABASE_URL (comma-separated) for the tail, catch-up and JSON reads; writes, LISTEN, queues and the janitor stay on the primary. A standby that lags past READ_LAG_WAIT, stops, restarts or is promoted is left for the primary (logged, /readyz, /metrics) and rejoins when caught up; no event is lost or repeated. Unset: every read goes to the primary.',
    parse: (raw) =>
      (raw ?? '')
        .split(',')
        .map((u) => u.trim())
        .filter((u) => u !== ''),
  },
  readLagWaitMs: duration(
    'READ_LAG_WAIT',
    '1s',
    0,
    'Longest a read waits for a standby to replay the commit it must see (a wake, a read after a publish) before it reads the primary instead; the standby then serves no reads until it is less than a second behind.',
    { max: MAX_TIMER_MS },
  ),
  dataDir: text('DATA_DIR', '.data', 'Data folder of the embedded PostgreSQL (kept across restarts).'),
  embeddedPgPort: int('EMBEDDED_PG_PORT', 54329, 1, 'Port of the embedded PostgreSQL.'),
  poolSize: int(
    'POOL_SIZE',
    10,
    2,
    "Connections in the query pool (the LISTEN connection and the tail read's are two more).",
  ),
  statementTimeoutMs: duration(
    'STATEMENT_TIMEOUT',
    '30s',
    100,
    'Longest a single SQL statement may run; a stalled database gives 503 instead of a hang.',
    { max: MAX_TIMER_MS },
  ),
  preparedStatements: bool(
    'PREPARED_STATEMENTS',
    true,
    'Run the hot feed queries as named prepared statements (planning a query over the partitioned feed costs more than running it); false behind a pooler that cannot keep them.',
  ),
  logLevel: text(
    'LOG_LEVEL',
    'info',
    'fatal, error, warn, info, debug (also logs every request), trace or silent.',
  ),

  maxBodyBytes: int(
    'MAX_BODY_BYTES',
    1024 * 1024,
    1024,
    'Largest request body, in bytes; over it: 413.',
    'Limits',
  ),
  maxEventBytes: int(
    'MAX_EVENT_BYTES',
    1024 * 1024,
    16,
    'Largest single event `data` or job `payload` (JSON text), in bytes; over it: 413.',
  ),
  maxJobResultBytes: int(
    'MAX_JOB_RESULT_BYTES',
    64 * 1024,
    2,
    'Largest job `result` stored with an ack (JSON text), in bytes; over it: 413 result_too_large.',
  ),
  maxSseConnections: int(
    'MAX_SSE_CONNECTIONS',
    20000,
    1,
    'SSE connections served by one process; over it, 503 too_many_connections with Retry-After before the stream starts.',
  ),
  slowSubscriberMaxMs: duration(
    'SLOW_SUBSCRIBER_TIMEOUT',
    '30s',
    100,
    'An SSE subscriber whose socket has accepted no bytes for this long is dropped; every frame it received carries an id, so it resumes with Last-Event-ID and loses nothing. Bounds memory per client.',
    { max: MAX_TIMER_MS },
  ),

  batchMaxEvents: int(
    'BATCH_MAX_EVENTS',
    2000,
    1,
    'Most events (or jobs) gathered into one group-commit transaction.',
    'Delivery',
  ),
  windowEvents: int(
    'WINDOW_EVENTS',
    10000,
    100,
    'Recent events kept in memory to serve live and reconnecting subscribers without a query.',
  ),
  pageSize: int('PAGE_SIZE', 1000, 10, 'Rows per tail or catch-up query.'),
  pollIntervalMs: duration(
    'POLL_INTERVAL',
    '1s',
    10,
    'Fallback poll of the feed when no notification arrives (notifications are only a hint).',
    { max: MAX_TIMER_MS },
  ),
  idleReadDelayMs: duration(
    'IDLE_READ_DELAY',
    '25ms',
    0,
    'While no SSE subscriber, long-poll or waiting claim is connected to a process, it reads the feed at most this often after commits (one read for many commits instead of one each); a client that connects makes it read at once. 0: read after every commit.',
    { max: 1000 },
  ),
  tailFloorMarginMs: duration(
    'TAIL_FLOOR_MARGIN',
    '1h',
    0,
    "The tail read skips feed partitions wholly older than a time below which it has read every row, so its cost does not grow with RETENTION; that time trails what it has proved by this margin (covering the database clock's small steps back). 0: every tail read covers every partition.",
  ),
  startWaitMs: duration(
    'START_WAIT',
    '5s',
    0,
    'Longest wait for a safe start position (a `latest` subscription, a JSON read after a publish) while an open transaction holds committed events behind the horizon; then 503 with Retry-After.',
    { max: MAX_TIMER_MS },
  ),
  heartbeatMs: duration(
    'HEARTBEAT_INTERVAL',
    '15s',
    100,
    'SSE comment heartbeat; keep it below the shortest idle timeout of the proxies on the path.',
    { max: MAX_TIMER_MS },
  ),
  sseRetryMs: duration(
    'SSE_RETRY',
    '2s',
    0,
    'Reconnect delay suggested to SSE clients (the `retry:` field).',
    {
      max: MAX_TIMER_MS,
    },
  ),

  auth: {
    name: 'AUTH',
    doc: 'jwt requires a token on every non-public route; off disables access control (logged loudly). Unset: jwt when a key below is set; with no key, off on a loopback HOST only (a non-loopback HOST without a key refuses to start).',
    section: 'Access control (docs/access-control.md)',
    parse(raw) {
      if (raw === undefined) return undefined;
      if (raw === 'off' || raw === 'jwt') return raw;
      throw new Error(`AUTH must be "off" or "jwt" (got ${JSON.stringify(raw)})`);
    },
  },
  jwtSecret: optional(
    'JWT_SECRET',
    'HS256 secret, at least 32 bytes (e.g. `openssl rand -base64 32`); `npm run token` signs with it.',
  ),
  jwtPublicKey: {
    name: 'JWT_PUBLIC_KEY',
    doc: 'A PEM public key (RSA: RS256; EC P-256/P-384: ES256/ES384; Ed25519: EdDSA), inline; or JWT_PUBLIC_KEY_FILE, a file holding it.',
    parse(raw, env) {
      if (raw !== undefined) return raw;
      const file = env.JWT_PUBLIC_KEY_FILE;
      return file ? readFileSync(file, 'utf8') : undefined;
    },
  },
  jwksFile: optional('JWKS_FILE', 'A local JSON Web Key Set of public keys, chosen by the token’s `kid`.'),
  jwtIssuer: optional('JWT_ISSUER', 'When set, tokens must carry this issuer (`iss`).'),
  jwtAudience: optional('JWT_AUDIENCE', 'When set, tokens must carry this audience (`aud`).'),
  corsOrigins: {
    name: 'CORS_ORIGINS',
    doc: 'Browser origins allowed by CORS: comma-separated exact origins (https://app.example.com), allowed with credentials, or * (any origin, without credentials). Unset: no CORS headers (same origin only).',
    parse: (raw) =>
      (raw ?? '')
        .split(',')
        .map((o) => o.trim())
        .filter((o) => o !== ''),
  },
  maxSsePerToken: int(
    'MAX_SSE_PER_TOKEN',
    100,
    1,
    'SSE connections one token may hold at once; over it, 429 too_many_connections.',
  ),
  metricsRequireAdmin: bool(
    'METRICS_REQUIRE_ADMIN',
    false,
    '/metrics needs a token with admin: true (when access control is on); else it is public.',
  ),

  retentionMs: duration(
    'RETENTION',
    '7d',
    1000,
    'Feed events (and dead queue jobs) older than this are dropped, a whole partition at a time.',
    { section: 'Retention (docs/operations.md#retention)' },
  ),
  jobRetentionMs: duration(
    'JOB_RETENTION',
    '10m',
    0,
    'Completed and cancelled queue jobs stay readable (GET a job: state, result) this long, then the janitor deletes them.',
  ),
  partitionIntervalMs: duration(
    'PARTITION_INTERVAL',
    '1d',
    1000,
    'Time span of one feed partition: the unit in which history is dropped.',
  ),
  partitionPremake: int('PARTITION_PREMAKE', 3, 1, 'Partitions kept created ahead of the clock.'),
  dedupWindowMs: duration(
    'DEDUP_WINDOW',
    '7d',
    1000,
    'An idempotency key deduplicates for at least this long after its event was appended.',
  ),
  janitorIntervalMs: duration(
    'JANITOR_INTERVAL',
    '5m',
    0,
    'How often this process tries to run maintenance (one instance at a time does it); 0: never here (then run `npm run maint -- run` from cron).',
    { max: MAX_TIMER_MS },
  ),
  janitorLockTimeoutMs: duration(
    'JANITOR_LOCK_TIMEOUT',
    '1s',
    10,
    'Longest maintenance waits for a table lock before retrying at its next run; publishes wait at most this long behind it.',
    { max: MAX_TIMER_MS },
  ),

  flows: bool(
    'FLOWS',
    true,
    'Run the stream-subscription follower and the cron scheduler here (every replica may: each event and each tick still becomes exactly one job).',
    'Flows into queues (docs/queues.md#streams-feeding-queues)',
  ),
  scheduleLateAfterMs: duration(
    'SCHEDULE_LATE_AFTER',
    '1m',
    1000,
    'A schedule tick not enqueued within this of its time counts as missed, and its catch-up policy decides (none, last, all).',
    { max: MAX_TIMER_MS },
  ),
  mercureIssuers: {
    name: 'MERCURE_ISSUERS',
    default: '[]',
    doc: 'Issuers of Mercure hub tokens, as JSON: [{"iss": "https://app.example.com", "secret" | "publicKey" | "publicKeyFile" | "jwksFile": ..., "role"?: "publish" | "subscribe"}]. Each key verifies only tokens whose `iss` equals its entry\'s.',
    section: 'Mercure hub: authorization (docs/mercure-auth.md)',
    parse: (raw) => parseMercureIssuers(raw ?? '[]'),
  },
  mercureResource: {
    name: 'MERCURE_RESOURCE',
    doc: "The hub's resource identifier, which tokens must carry in `aud`: its public URL, e.g. https://hub.example.com/.well-known/mercure (required with MERCURE_ISSUERS).",
    parse(raw) {
      if (raw === undefined) return undefined;
      let ok = false;
      try {
        const u = new URL(raw);
        ok = (u.protocol === 'https:' || u.protocol === 'http:') && u.hash === '' && u.search === '';
      } catch {
        // reported below
      }
      if (!ok)
        throw new Error(
          `MERCURE_RESOURCE must be an http(s) URL without query or fragment (got ${JSON.stringify(raw)})`,
        );
      return raw;
    },
  },
  mercureAlgorithms: setting(
    'MERCURE_ALGORITHMS',
    'EdDSA,ES256,ES384,RS256,HS256',
    'Signature algorithms the hub accepts, comma-separated; a key still verifies only its own algorithm, and `none` is never accepted.',
    undefined,
    (raw) => {
      const list = (raw ?? '')
        .split(',')
        .map((a) => a.trim())
        .filter((a) => a !== '');
      const known = [
        'EdDSA',
        'ES256',
        'ES384',
        'RS256',
        'RS384',
        'RS512',
        'PS256',
        'PS384',
        'PS512',
        'HS256',
      ];
      const bad = list.filter((a) => !known.includes(a));
      if (list.length === 0 || bad.length > 0) {
        throw new Error(
          `MERCURE_ALGORITHMS must list some of ${known.join(', ')} (got ${JSON.stringify(raw)})`,
        );
      }
      return list;
    },
  ),
  mercureAnonymous: bool(
    'MERCURE_ANONYMOUS',
    false,
    'Subscribers without a token may connect and receive public updates (never private ones); false: the hub requires a token to subscribe.',
  ),
  mercureCookie: text(
    'MERCURE_COOKIE',
    '__Secure-mercure_access_token',
    'Cookie the hub reads the token from when the request has no Authorization header (for EventSource).',
  ),
  mercurePublishOrigins: {
    name: 'MERCURE_PUBLISH_ORIGINS',
    doc: 'Origins (scheme://host[:port]) whose pages may publish with the cookie, checked against Origin, else Referer (CSRF). Unset: publishing with the cookie is refused; the Authorization header is unaffected.',
    parse: (raw) => parseOrigins('MERCURE_PUBLISH_ORIGINS', raw ?? ''),
  },
  mercureSubscriptions: bool(
    'MERCURE_SUBSCRIPTIONS',
    false,
    "Active subscriptions: each subscription's start and end published as a private update on <hub>/subscriptions/{match_type}/{match}/{subscriber}, and the subscriptions API.",
  ),
  mercureInstanceLeaseMs: duration(
    'MERCURE_INSTANCE_LEASE',
    '30s',
    1000,
    'An instance renews its lease every third of this; when it dies, another instance publishes `active: false` for its subscriptions once the lease has run out.',
    { max: MAX_TIMER_MS },
  ),
};

/** Variables read by a setting besides its own name (documented beside it). */
export const COMPANIONS: Record<string, { name: string; doc: string }> = {
  JWT_PUBLIC_KEY: {
    name: 'JWT_PUBLIC_KEY_FILE',
    doc: 'A file holding the PEM public key, when JWT_PUBLIC_KEY is unset.',
  },
};

/**
 * Names used before durations took units. Nothing was released with them, so they are refused with
 * the new name rather than silently ignored (a setting that quietly stops working is worse).
 */
export const RENAMED: Record<string, string> = {
  POLL_INTERVAL_MS: 'POLL_INTERVAL',
  HEARTBEAT_MS: 'HEARTBEAT_INTERVAL',
  SSE_RETRY_MS: 'SSE_RETRY',
  STATEMENT_TIMEOUT_MS: 'STATEMENT_TIMEOUT',
  SLOW_SUBSCRIBER_MAX_MS: 'SLOW_SUBSCRIBER_TIMEOUT',
  JANITOR_LOCK_TIMEOUT_MS: 'JANITOR_LOCK_TIMEOUT',
};

/** Every documented variable, in table order: what `.env.example` and docs/configuration.md list. */
export function documentedVariables(): {
  name: string;
  default: string | undefined;
  doc: string;
  section?: string;
}[] {
  const out: { name: string; default: string | undefined; doc: string; section?: string }[] = [];
  for (const s of Object.values(SETTINGS) as Setting<unknown>[]) {
    out.push({ name: s.name, default: s.default, doc: s.doc, section: s.section });
    const companion = COMPANIONS[s.name];
    if (companion) out.push({ name: companion.name, default: undefined, doc: companion.doc });
  }
  return out;
}

export function loadConfig(env: Env = process.env): Config {
  for (const [old, now] of Object.entries(RENAMED)) {
    if (env[old] !== undefined && env[old] !== '') {
      const suggestion = /^\d+$/.test(env[old]) ? `${now}=${formatMs(Number(env[old]))}` : now;
      throw new Error(
        `${old} is no longer read: set ${suggestion} instead (durations take a unit: 250ms, 5s, 7d)`,
      );
    }
  }
  const config: Record<string, unknown> = {};
  for (const [field, s] of Object.entries(SETTINGS) as [string, Setting<unknown>][]) {
    const given = env[s.name];
    config[field] = s.parse(given === undefined || given === '' ? s.default : given, env);
  }
  return config as unknown as Config;
}

/** Reads `.env` into process.env (without overriding variables already set). */
export function loadDotEnv(file = '.env'): void {
  if (existsSync(file)) process.loadEnvFile(file);
}
