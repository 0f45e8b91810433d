/**
 * A real PgBouncer for tests: Debian's /usr/sbin/pgbouncer (`apt-get install pgbouncer`), started as
 * a process of its own on a port of its own, `pool_mode = transaction` and default settings otherwise
 * (so a startup parameter such as statement_timeout is refused, as in production), in front of the
 * test's PostgreSQL. Clients log in without a password (auth_type trust); PgBouncer logs in to
 * PostgreSQL with the test URL's user and password (its auth_file).
 *
 * PgBouncer refuses to run as root: as root it runs as the `postgres` user, its ini, log and pid
 * files in a temporary folder handed to that user. `stop()` (also at teardown, and at process exit
 * if the test runner dies first; a test process killed by a signal takes PgBouncer with it, see
 * start) ends it; `restart()` stops it and starts it again on the same port.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { freePort } from './helpers.ts';

export const PGBOUNCER = '/usr/sbin/pgbouncer';
const SETPRIV = '/usr/bin/setpriv';

/** Why PgBouncer tests cannot run here (a `skip` reason), or false when they can. */
export function pgbouncerMissing(): string | false {
  return existsSync(PGBOUNCER)
    ? false
    : `${PGBOUNCER} is missing: install Debian's pgbouncer (apt-get install -y pgbouncer) to run these tests`;
}

export interface PgBouncer {
  port: number;
  /** `databaseUrl` (a database on the target server) reached through PgBouncer instead. */
  url(databaseUrl: string): string;
  stop(): Promise<void>;
  start(): Promise<void>;
  restart(pauseMs?: number): Promise<void>;
  /** PgBouncer's log so far (for failure messages). */
  log(): string;
  /** The running process's id (benches read its CPU time). */
  pid(): number | undefined;
}

type T = { teardown(fn: () => unknown): void };

/**
 * Starts PgBouncer in front of the server of `targetUrl`. `settings`: more lines of [pgbouncer]
 * (e.g. ignore_startup_parameters), for the tests of what a misconfigured deployment is told.
 */
export async function startPgBouncer(
  t: T,
  targetUrl: string,
  settings: Record<string, string> = {},
): Promise<PgBouncer> {
  const target = new URL(targetUrl);
  const port = await freePort();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'commitfeed-pgbouncer-'));
  const user = decodeURIComponent(target.username || 'postgres');
  const password = decodeURIComponent(target.password);
  const ini = {
    listen_addr: '127.0.0.1',
    listen_port: String(port),
    unix_socket_dir: dir,
    auth_type: 'trust',
    auth_file: path.join(dir, 'userlist.txt'),
    pool_mode: 'transaction',
    logfile: path.join(dir, 'pgbouncer.log'),
    pidfile: path.join(dir, 'pgbouncer.pid'),
    ...settings,
  };
  const host = target.hostname === 'localhost' ? '127.0.0.1' : target.hostname;
  writeFileSync(
    path.join(dir, 'pgbouncer.ini'),
    `[databases]\n* = host=${host} port=${target.port || 5432}\n\n[pgbouncer]\n${Object.entries(ini)
      .map(([k, v]) => `${k} = ${v}`)
      .join('\n')}\n`,
  );
  writeFileSync(path.join(dir, 'userlist.txt'), `"${user}" "${password}"\n`);
  const owner = os.userInfo().uid === 0 ? postgresUser() : undefined;
  if (owner)
    for (const f of ['', 'pgbouncer.ini', 'userlist.txt']) chownSync(path.join(dir, f), owner.uid, owner.gid);

  let proc: ChildProcess | undefined;
  const kill = () => proc?.kill('SIGKILL');
  process.once('exit', kill);
  const log = () => {
    try {
      return readFileSync(ini.logfile, 'utf8');
    } catch {
      return '';
    }
  };
  const stop = async () => {
    const p = proc;
    proc = undefined;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise<void>((r) => p.once('exit', () => r()));
    // SIGTERM: immediate shutdown (clients are disconnected, as when a pooler dies or is redeployed).
    p.kill('SIGTERM');
    const timer = setTimeout(() => p.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  };
  const start = async () => {
    const ini = path.join(dir, 'pgbouncer.ini');
    // Through setpriv --pdeathsig (util-linux): PgBouncer is killed when this process dies, even by
    // a signal (a test killed on timeout runs no exit handler), instead of outliving the run.
    const [cmd, args] = existsSync(SETPRIV)
      ? [SETPRIV, ['--pdeathsig', 'KILL', PGBOUNCER, ini]]
      : [PGBOUNCER, [ini]];
    const p = spawn(cmd, args, {
      cwd: dir,
      stdio: 'ignore',
      ...(owner ?? {}),
    });
    proc = p;
    p.on('error', () => {});
    const deadline = Date.now() + 15_000;
    while (!(await accepts(port))) {
      if (p.exitCode !== null || p.signalCode !== null || Date.now() > deadline) {
        await stop();
        throw new Error(`PgBouncer did not start on port ${port}: ${log().slice(-2000)}`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  t.teardown(async () => {
    await stop();
    process.removeListener('exit', kill);
    rmSync(dir, { recursive: true, force: true });
  });
  await start();
  return {
    port,
    url(databaseUrl) {
      const u = new URL(databaseUrl);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
    stop,
    start,
    async restart(pauseMs = 0) {
      await stop();
      if (pauseMs > 0) await new Promise((r) => setTimeout(r, pauseMs));
      await start();
    },
    log,
    pid: () => proc?.pid,
  };
}

function postgresUser(): { uid: number; gid: number } {
  const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
  return { uid: id('-u'), gid: id('-g') };
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}
