// The README's own set-up — `npm start` with the embedded PostgreSQL — stopped each way it is stopped
// in practice: Ctrl-C (SIGINT to the whole foreground process group) with a publish in flight, SIGTERM
// to npm (a supervisor, `kill`), SIGHUP to npm (its terminal closed), SIGKILL of the server. After each,
// nothing of the process tree is left (no npm, no node, no postgres of the data folder), and the next
// start serves; after SIGKILL it stops the PostgreSQL left behind and says so. `npm run maint` finds
// the embedded database of the running service.
import { type ChildProcess, spawn } from 'node:child_process';
import { chmod, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { freePort, onLogLines, publish, pgClient, sleep, until, within } from './helpers.ts';

// Five starts of the real `npm start` (each a few seconds of CPU, more on a busy machine) and their drains.
t.setTimeout(240_000);

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const dataDir = await mkdtemp(path.join(os.tmpdir(), 'commitfeed-lifecycle-'));
// As root the server runs as the `postgres` user, which must enter the folder.
await chmod(dataDir, 0o755);
const pgDir = path.join(dataDir, 'pg');
const pgPort = await freePort();
const pgUrl = `postgres://postgres:postgres@127.0.0.1:${pgPort}/postgres`;
const env: NodeJS.ProcessEnv = {
  PORT: '0',
  EMBEDDED_PG_PORT: String(pgPort),
  DATA_DIR: dataDir,
  LOG_LEVEL: 'info',
};
for (const [k, v] of Object.entries(process.env)) if (!/DATABASE_URL/.test(k)) env[k] ??= v;

interface Proc {
  pid: number;
  state: string;
  pgrp: number;
  args: string[];
}

/** Every live process (zombies are dead: their parent just has not collected them). */
async function processes(): Promise<Proc[]> {
  const out: Proc[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = await readFile(`/proc/${name}/stat`, 'utf8');
      const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const args = (await readFile(`/proc/${name}/cmdline`, 'utf8')).split('\0');
      if (state !== 'Z') out.push({ pid: Number(name), state, pgrp: Number(pgrp), args });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

const isPostgresOfDir = (p: Proc) => path.basename(p.args[0]) === 'postgres' && p.args.includes(pgDir);
const postgresOfDir = async () => (await processes()).filter(isPostgresOfDir);

/** Waits until nothing of the tree npm started (its process group) nor a postgres of the folder runs. */
async function treeGone(npm: Started): Promise<void> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const left = (await processes()).filter((p) => p.pgrp === npm.proc.pid || isPostgresOfDir(p));
    if (left.length === 0) return;
    if (Date.now() > deadline) {
      throw new Error(
        `still running 20 s after the stop: ${left.map((p) => `${p.pid} ${p.args.join(' ')}`)}`,
      );
    }
    await sleep(100);
  }
}

interface Started {
  proc: ChildProcess;
  url: string;
  /** The server's node process (npm's child). */
  serverPid: number;
  logs: Record<string, unknown>[];
  exited: Promise<string>;
}

/** `npm start` in a process group of its own, as a terminal runs a foreground job. */
async function npmStart(t: Test): Promise<Started> {
  const proc = spawn('npm', ['start'], { cwd: ROOT, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  t.teardown(() => {
    try {
      process.kill(-proc.pid!, 'SIGKILL');
    } catch {
      // already gone
    }
  });
  const logs: Record<string, unknown>[] = [];
  let stderr = '';
  proc.stderr!.on('data', (c) => (stderr += c));
  const exited = new Promise<string>((r) => proc.on('exit', (code, sig) => r(sig ?? `exit ${code}`)));
  const ready = new Promise<Started>((resolve, reject) => {
    onLogLines(proc, (_line, j) => {
      if (!j) return;
      logs.push(j);
      if (j.msg === 'commitfeed ready') {
        resolve({ proc, url: j.url as string, serverPid: j.pid as number, logs, exited });
      }
    });
    void exited.then((how) => reject(new Error(`npm start ended (${how}) before it was ready: ${stderr}`)));
  });
  return within(ready, 60_000, () => `npm start to be ready (stderr: ${stderr})`);
}

async function serves(t: Test, s: Started, data: string): Promise<void> {
  const res = await publish(s.url, 'life', { data });
  t.equal(res.status, 201, `it serves: a publish is stored (${JSON.stringify(res.body)})`);
}

/** Resolves when the service has logged `msg`. */
const logged = (s: Started, msg: string) =>
  until(() => s.logs.some((j) => j.msg === msg), 20_000, `log "${msg}"`);

/** `npm run maint -- stats` as an operator runs it beside `npm start` (same DATA_DIR, no DATABASE_URL). */
async function maintStats(t: Test): Promise<void> {
  const maint = spawn('npm', ['run', '--silent', 'maint', '--', 'stats'], { cwd: ROOT, env, stdio: 'pipe' });
  t.teardown(() => maint.kill('SIGKILL'));
  let out = '';
  let err = '';
  maint.stdout.on('data', (c) => (out += c));
  maint.stderr.on('data', (c) => (err += c));
  const code = await within(new Promise((r) => maint.on('exit', r)), 60_000, 'npm run maint');
  t.equal(code, 0, `npm run maint -- stats exits 0 (${err.trim()})`);
  t.ok(code === 0 && Array.isArray(JSON.parse(out).partitions), 'and prints the feed statistics');
}

t.teardown(async () => {
  for (const p of await postgresOfDir()) process.kill(p.pid, 'SIGKILL');
  await rm(dataDir, { recursive: true, force: true });
});

t.test(
  'Ctrl-C (SIGINT to the process group): the publish in flight during the drain gets its result',
  async (t) => {
    const s = await npmStart(t);
    await serves(t, s, 'first');
    // A transaction of ours published key "k": a publish with the same key waits on its row lock. (Plain
    // clients with error listeners: a database that ends their sessions fails this test, not the file.)
    const holder = await pgClient(t, pgUrl);
    const watcher = await pgClient(t, pgUrl);
    await holder.query('begin');
    await holder.query(`select commitfeed.publish('life', '"holder"', null, 'k')`);
    const inFlight = publish(s.url, 'life', { data: 'in-flight', key: 'k' }).catch(
      (err: Error) => err.message,
    );
    await until(
      async () => {
        const { rows } = await watcher.query(
          "select count(*)::int as n from pg_stat_activity where application_name = 'commitfeed' and wait_event_type = 'Lock'",
        );
        return rows[0].n > 0;
      },
      10_000,
      'the publish to wait on the row lock',
    );

    process.kill(-s.proc.pid!, 'SIGINT');
    await logged(s, 'shutting down');
    // A database that got the terminal's SIGINT too ends every session within milliseconds: give it time.
    await sleep(500);
    const rollback = await holder.query('rollback').then(
      () => 'rolled back',
      (err: Error) => err.message,
    );
    t.equal(rollback, 'rolled back', 'our own session was not ended under us');
    const done = await inFlight;
    t.equal(typeof done === 'string' ? done : done.status, 201, 'the publish in flight was stored');
    t.equal(await within(s.exited, 20_000, 'npm to exit'), 'exit 0', 'npm exits 0');
    await treeGone(s);
  },
);

t.test('SIGHUP to npm (its terminal closed) ends the whole tree', async (t) => {
  const s = await npmStart(t);
  await serves(t, s, 'after SIGINT');
  process.kill(s.proc.pid!, 'SIGHUP');
  await treeGone(s);
  t.ok(
    s.logs.some((j) => j.msg === 'shutting down'),
    'the server drained (it stopped when npm was gone)',
  );
});

t.test(
  '`npm run maint` finds the running embedded database; after SIGKILL of the server the next start stops the PostgreSQL it left, says so, and serves',
  async (t) => {
    const killed = await npmStart(t);
    await serves(t, killed, 'after SIGHUP');
    await maintStats(t);
    const [leftover] = await postgresOfDir();
    t.ok(leftover, 'the embedded PostgreSQL runs');
    process.kill(killed.serverPid, 'SIGKILL');
    await within(killed.exited, 20_000, 'npm to exit');
    t.ok(
      (await postgresOfDir()).some((p) => p.pid === leftover.pid),
      'its PostgreSQL is left running',
    );

    const s = await npmStart(t);
    t.ok(
      s.logs.some(
        (j) => /stopped a leftover embedded PostgreSQL/.test(String(j.msg)) && j.postgresPid === leftover.pid,
      ),
      'the start found the leftover server, stopped it and logged it',
    );
    await serves(t, s, 'after SIGKILL');
    const counted = await (await pgClient(t, pgUrl)).query(
      "select count(*)::int as n from commitfeed.feed where stream = 'life'",
    );
    t.equal(counted.rows[0].n, 5, 'every event stored before is still there');

    // SIGTERM to npm, as a supervisor stops `npm start`: it waits for the drain and exits 0.
    process.kill(s.proc.pid!, 'SIGTERM');
    t.equal(
      await within(s.exited, 20_000, 'npm to exit'),
      'exit 0',
      'SIGTERM to npm: it exits 0 after the drain',
    );
    await treeGone(s);
  },
);
