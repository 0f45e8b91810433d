/**
 * Shared test plumbing: a migrated database per test (cloned from the run's template), servers that
 * are always stopped, an SSE reader, bounded waits on conditions.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { isPrimer, parseSse, type SseMessage, textChunks } from '../src/client/sse.ts';
import { type Config, loadConfig } from '../src/config/config.ts';
import type { Database } from '../src/db/database.ts';
import { epochTag, formatCursor, parseCursor } from '../src/feed/cursor.ts';
import { readFeedEpoch } from '../src/feed/queries/feed-epoch.ts';
import { migrate } from '../src/db/migrate.ts';
import { type Server, startServer } from '../src/server.ts';
import { templateName, withDatabase } from './template-database.ts';
import { nodeArgs } from './ts-node-args.ts';

// biome-ignore lint/suspicious/noExplicitAny: tap's Test type is not needed in detail here
type T = { teardown(fn: () => unknown): void } & Record<string, any>;

export const adminUrl = (): string => {
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error('DATABASE_URL is not set: run the tests with `npm test`');
  return url;
};

const runId = process.env.TEST_RUN_ID;

async function adminQuery(text: string): Promise<void> {
  const admin = new pg.Client({ connectionString: adminUrl() });
  admin.on('error', () => {});
  await admin.connect();
  try {
    await admin.query(text);
  } finally {
    await admin.end();
  }
}

async function newDatabase(t: T, template: string | undefined): Promise<string> {
  const name = `cf_test_${runId ?? 'x'}_${randomBytes(5).toString('hex')}`;
  await adminQuery(template ? `create database ${name} template ${template}` : `create database ${name}`);
  t.teardown(() => adminQuery(`drop database if exists ${name} with (force)`));
  return withDatabase(adminUrl(), name);
}

/**
 * A fresh database with the whole schema, dropped when the test ends: a clone of the run's migrated
 * template (test/run.ts). A file run by tap directly, without `npm test`, migrates its own.
 */
export async function testDatabase(t: T): Promise<string> {
  if (runId) return newDatabase(t, templateName(runId));
  const url = await newDatabase(t, undefined);
  const db = new Kysely<unknown>({
    dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 1 }) }),
  });
  await migrate(db).finally(() => db.destroy());
  return url;
}

/** A fresh, empty database (no schema), for tests of the migrations themselves. */
export function emptyDatabase(t: T): Promise<string> {
  return newDatabase(t, undefined);
}

/** Starts a server on a random port; stopped at teardown even when the test fails. */
export async function startTestServer(
  t: T,
  databaseUrl: string,
  overrides: Partial<Config> = {},
): Promise<Server> {
  const config: Config = {
    ...loadConfig({}),
    port: 0,
    databaseUrl,
    logLevel: process.env.TEST_LOG_LEVEL ?? 'silent',
    pollIntervalMs: 200,
    sseRetryMs: 100,
    // The tail floor trails what it proved by 1h in production, where tests would never reach it:
    // 50ms puts every test's held transactions and out-of-order commits across it.
    tailFloorMarginMs: 50,
    // Tests count notifications, tail reads and feed rows exactly: a self-check marker would be one
    // more of each. The self-check's own tests turn it on.
    selfCheckIntervalMs: 0,
    ...overrides,
  };
  const server = await startServer(config);
  t.teardown(() => server.close());
  return server;
}

const ROOT = fileURLToPath(new URL('../', import.meta.url));

/**
 * Starts the real service (`src/main.ts` under the tests' loader, PORT=0) as a child process, for tests
 * that signal or kill it; resolves with its URL once it logs that it is ready. It is SIGKILLed at
 * teardown if still running, so a failing test leaves no process behind.
 */
export function startService(
  t: T,
  databaseUrl: string,
  env: Record<string, string> = {},
): Promise<{ proc: ChildProcess; url: string }> {
  const proc = spawn(process.execPath, nodeArgs('src/main.ts'), {
    cwd: ROOT,
    // TAIL_FLOOR_MARGIN: as in startTestServer.
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl,
      PORT: '0',
      LOG_LEVEL: 'info',
      TAIL_FLOOR_MARGIN: '50ms',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  t.teardown(() => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
  });
  return new Promise((resolve, reject) => {
    onLogLines(proc, (_line, j) => {
      if (j?.msg === 'commitfeed ready' && typeof j.url === 'string') resolve({ proc, url: j.url });
    });
    proc.on('exit', (code) => reject(new Error(`service exited with ${code} before it was ready`)));
  });
}

/** Calls `fn` with every line a child process writes to stdout, and the line parsed when it is a JSON
 * log line (undefined otherwise). */
export function onLogLines(
  proc: ChildProcess,
  fn: (line: string, json: Record<string, unknown> | undefined) => void,
): void {
  let buf = '';
  proc.stdout!.setEncoding('utf8');
  proc.stdout!.on('data', (chunk: string) => {
    buf += chunk;
    for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      let json: Record<string, unknown> | undefined;
      try {
        json = JSON.parse(line) as Record<string, unknown>;
      } catch {
        // not a log line
      }
      fn(line, json);
    }
  });
}

/** A Kysely instance of the test's own (for raw transactions), destroyed at teardown. */
export function sqlClient(t: T, databaseUrl: string): Kysely<Database> {
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 5 });
  pool.on('error', () => {});
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  t.teardown(() => db.destroy());
  return db;
}

/** A plain pg client (an application's own session, for raw transactions), ended at teardown. */
export async function pgClient(t: T, url: string): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: url });
  c.on('error', () => {});
  await c.connect();
  t.teardown(() => c.end());
  return c;
}

export async function publish(
  base: string,
  stream: string,
  body: unknown,
): Promise<{
  status: number;
  headers: Headers;
  body: { id: string; duplicate?: boolean; events?: { id: string }[]; code?: string; message?: string };
}> {
  const res = await fetch(`${base}/v1/streams/${encodeURIComponent(stream)}/events`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, body: (await res.json()) as never };
}

export interface SseReader {
  status: number;
  /** The primed cursor (the priming frame's `id:`, see isPrimer). */
  primed: string | undefined;
  /** Messages with data received so far. */
  received: SseMessage[];
  /** Waits until at least `n` data messages have arrived (or fails after `ms`). */
  waitFor(n: number, ms?: number): Promise<SseMessage[]>;
  close(): void;
  /** Resolves when the server ends the stream. */
  ended: Promise<void>;
}

/** Opens an SSE stream and collects its messages in the background; closed at teardown. */
export async function openSse(t: T, url: string, headers: Record<string, string> = {}): Promise<SseReader> {
  const abort = new AbortController();
  const res = await within(
    fetch(url, { headers: { accept: 'text/event-stream', ...headers }, signal: abort.signal }),
    20_000,
    `the answer to the stream request ${url}`,
  );
  const received: SseMessage[] = [];
  let primed: string | undefined;
  let primedResolve!: () => void;
  const primedP = new Promise<void>((r) => (primedResolve = r));
  let notify = () => {};
  const ended = (async () => {
    if (!res.body) return;
    try {
      for await (const m of parseSse(textChunks(res.body))) {
        if (isPrimer(m)) {
          primed ??= m.id;
          primedResolve();
          continue;
        }
        if (m.data === undefined) continue; // a retry hint
        received.push(m);
        notify();
      }
    } catch {
      // aborted
    } finally {
      primedResolve();
      notify();
    }
  })();
  const reader: SseReader = {
    status: res.status,
    get primed() {
      return primed;
    },
    received,
    ended,
    close: () => abort.abort(),
    async waitFor(n, ms = 10000) {
      const deadline = Date.now() + ms;
      while (received.length < n) {
        const left = deadline - Date.now();
        if (left <= 0) throw new Error(`expected ${n} SSE messages, got ${received.length} after ${ms} ms`);
        await Promise.race([new Promise<void>((r) => (notify = r)), sleep(Math.min(left, 100)), ended]);
      }
      return received.slice(0, n);
    },
  };
  t.teardown(() => abort.abort());
  // Every stream starts with its primed id; one that never comes (like an answer that never comes,
  // above) fails here, loudly, not at tap's timeout.
  if (res.status === 200) await within(primedP, 20_000, `the primed id of ${url}`);
  return reader;
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Waits until `cond()` holds (checked every 10 ms) and fails loudly, naming `what`, after `ms`.
 * Use it instead of a fixed sleep before an assertion: it returns as soon as the state is reached
 * (fast when the machine is idle) and still passes when a busy machine is slow.
 */
export async function until(
  cond: () => boolean | Promise<boolean>,
  ms = 10000,
  what = 'condition',
): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(10);
  }
}

/**
 * `promise`, or a loud failure naming `what` after `ms`. The timer is cleared when the promise settles:
 * a `Promise.race` against a bare setTimeout keeps the test process alive until the timer fires.
 */
export async function within<T>(promise: Promise<T>, ms: number, what: string | (() => string)): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(new Error(`timed out after ${ms} ms waiting for ${typeof what === 'string' ? what : what()}`)),
      ms,
    );
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** The tag that ends every cursor of the feed in `db` (src/feed/cursor.ts). */
export async function feedTag(db: Kysely<Database>): Promise<string> {
  return epochTag(await readFeedEpoch(db));
}

/** A cursor's position as `<txid>-<id>` (and the stream an event id names), without the feed's tag:
 * as clients kept cursors before the tag existed. */
export function untagged(cursor: string): string {
  const c = parseCursor(cursor);
  if (c === undefined) throw new Error(`not a cursor: ${cursor}`);
  const slash = cursor.indexOf('/');
  return slash === -1 ? formatCursor(c) : `${formatCursor(c)}${cursor.slice(slash)}`;
}

/** The id (second part) of a cursor. */
export function cursorId(cursor: string): number {
  const c = parseCursor(cursor);
  if (c === undefined) throw new Error(`not a cursor: ${cursor}`);
  return c.id;
}

/** A cursor as the service writes it: `<txid>-<id>.<tag>` (the tag: 8 hex digits). */
export const CURSOR_TEXT = /^\d+-\d+\.[0-9a-f]{8}$/;

/** Rows in the feed, in feed order; `cursor` as the service writes it (tagged). */
export async function feedRows(
  db: Kysely<Database>,
): Promise<{ cursor: string; stream: string; data: unknown }[]> {
  // Output names other than the columns': ORDER BY binds to output names first, so it would sort the
  // text outputs ('10' before '9').
  const { rows } = await sql<{ tx: string; n: string; stream: string; data: unknown }>`
    select f.txid::text as tx, f.id::text as n, f.stream, f.data from commitfeed.feed f
    order by f.txid, f.id`.execute(db);
  const tag = await feedTag(db);
  return rows.map((r) => ({
    cursor: formatCursor({ txid: Number(r.tx), id: Number(r.n) }, tag),
    stream: r.stream,
    data: r.data,
  }));
}

/**
 * A free TCP port on 127.0.0.1 for a process that needs a number before it starts and may be
 * restarted on it (PgBouncer, nginx, a replica killed and started again at the same URL).
 *
 * Chosen below Linux's ephemeral range (32768–60999), never from it: while such a process is down
 * between a stop and its restart, any outgoing connection on the machine may be given its port as a
 * local port (CI's parallel runs open thousands a second), and the restart then fails to bind —
 * which is how a PgBouncer restart in the pooler chaos test once failed. Ports 27000–32767 sit
 * above the test clusters' (TEST_PG_PORT + up to 1040) and are tried at random until one binds.
 */
export async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = 27000 + Math.floor(Math.random() * (32768 - 27000));
    if (await bindable(port)) return port;
  }
  throw new Error('no free port in 27000-32767 after 200 tries');
}

function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}
