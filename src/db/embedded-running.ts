/**
 * The embedded PostgreSQL of a data folder that is running now, found from its postmaster.pid: for
 * start-up (src/db/embedded.ts), which must not start a second server on the same folder, and for
 * `npm run maint`, which uses the server a running `npm start` started.
 *
 * A pid file proves nothing by itself: one left by a server killed with SIGKILL may name a process
 * that is gone, or by now another program. So the pid must be alive and really be a postgres of this
 * folder (its command line, from /proc, or from `ps` where there is no /proc).
 *
 * Whose it is: the process that starts a server writes its own pid to `commitfeed.owner` in the
 * folder, and is the server's parent for as long as it lives. A server whose parent is still that
 * process is in use (another commitfeed, another `npm test` on the same folder): start-up refuses
 * rather than stop a database under someone. A server whose starter died without stopping it (SIGKILL,
 * out of memory; it was re-parented) is a leftover: start-up stops it (fast shutdown, as the service
 * itself would have) and logs that it did, then starts the server with its own settings.
 */
import { execFile } from 'node:child_process';
import { readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';

export interface RunningServer {
  pid: number;
  port: number;
  /** Accepting connections (not starting up, nor shutting down). */
  ready: boolean;
  /** The postmaster's parent process. */
  ppid: number;
}

const OWNER_FILE = 'commitfeed.owner';
/** Longest wait for a leftover server's fast shutdown. */
const STOP_TIMEOUT_MS = 60_000;

/** The URL of the embedded server listening on `port` (its fixed superuser). */
export const embeddedUrl = (port: number): string =>
  `postgres://postgres:postgres@127.0.0.1:${port}/postgres`;

/** The server of data folder `dir` (absolute) running now, or undefined. */
export async function runningServer(dir: string): Promise<RunningServer | undefined> {
  const text = await readFile(path.join(dir, 'postmaster.pid'), 'utf8').catch(() => undefined);
  // Lines: pid, data folder, start time, port, socket folder, listen address, shared memory key, status.
  const lines = text?.split('\n') ?? [];
  const pid = Number(lines[0]);
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  const proc = await processInfo(pid);
  if (!proc || !isPostgresOf(proc.args, dir)) return undefined;
  return { pid, port: Number(lines[3]), ready: lines[7]?.trim() === 'ready', ppid: proc.ppid };
}

/** Records this process as the starter of the server of `dir` (see the header). */
export async function writeOwner(dir: string, pid: number): Promise<void> {
  await writeFile(path.join(dir, OWNER_FILE), `${pid}\n`);
}

/**
 * Before a start on `dir`: a leftover server is stopped (and `notice` says so), one in use is refused,
 * and a pid file whose process is gone is removed. A pid file naming a live process that is not a
 * postgres of this folder stays: PostgreSQL itself then refuses to start, with its reason.
 */
export async function stopLeftover(
  dir: string,
  notice: (fields: object, msg: string) => void,
): Promise<void> {
  const server = await runningServer(dir);
  if (!server) {
    const pid = Number(
      (await readFile(path.join(dir, 'postmaster.pid'), 'utf8').catch(() => '')).split('\n')[0],
    );
    if (pid > 0 && !alive(pid)) await rm(path.join(dir, 'postmaster.pid'), { force: true });
    return;
  }
  const owner = Number((await readFile(path.join(dir, OWNER_FILE), 'utf8').catch(() => '')).trim());
  if (owner > 0 && owner === server.ppid && alive(owner)) {
    throw new Error(
      `the embedded PostgreSQL of ${dir} (pid ${server.pid}, port ${server.port}) is in use by a running ` +
        `process (pid ${owner}): stop that one first, or give this one another DATA_DIR`,
    );
  }
  const started = Date.now();
  process.kill(server.pid, 'SIGINT');
  while ((await runningServer(dir))?.pid === server.pid) {
    if (Date.now() - started > STOP_TIMEOUT_MS) {
      throw new Error(
        `a leftover embedded PostgreSQL of ${dir} (pid ${server.pid}) did not stop within ` +
          `${STOP_TIMEOUT_MS / 1000} s: stop it (kill -INT ${server.pid}) and start again`,
      );
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  notice(
    { postgresPid: server.pid, port: server.port, dir, ms: Date.now() - started },
    'stopped a leftover embedded PostgreSQL of this data folder (its process ended without stopping it)',
  );
}

/** The URL of the embedded server of `dir` running now, or undefined (for `npm run maint`). */
export async function runningEmbeddedUrl(dir: string): Promise<string | undefined> {
  const server = await runningServer(dir);
  return server?.ready ? embeddedUrl(server.port) : undefined;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** `postgres -D <dir> ...`, as the postmaster keeps its command line (its children retitle theirs). */
function isPostgresOf(args: string[], dir: string): boolean {
  const d = args.indexOf('-D');
  return path.basename(args[0] ?? '') === 'postgres' && d > 0 && path.resolve(args[d + 1] ?? '') === dir;
}

/** A live process's parent and command line; undefined when it is gone or a zombie. */
async function processInfo(pid: number): Promise<{ ppid: number; args: string[] } | undefined> {
  try {
    const [stat, cmdline] = await Promise.all([
      readFile(`/proc/${pid}/stat`, 'utf8'),
      readFile(`/proc/${pid}/cmdline`, 'utf8'),
    ]);
    // "pid (comm) state ppid ...": the name may hold spaces and parentheses, so split after the last ')'.
    const [state, ppid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (state === 'Z') return undefined;
    return { ppid: Number(ppid), args: cmdline.split('\0').filter((a) => a !== '') };
  } catch {
    if (process.platform === 'linux') return undefined;
  }
  try {
    const { stdout } = await promisify(execFile)('ps', ['-o', 'ppid=', '-o', 'command=', '-p', String(pid)]);
    const [ppid, ...args] = stdout.trim().split(/\s+/);
    return ppid ? { ppid: Number(ppid), args } : undefined;
  } catch {
    return undefined;
  }
}
