// Child processes of a bench run: every server, load generator and subscriber is its own process
// (so none shares an event loop with what it measures). Each is started in its own process group
// and all are killed when the run ends, however it ends.
import { type ChildProcess, spawn } from 'node:child_process';
import { createWriteStream, mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

const live = new Set<ChildProcess>();

function killGroup(cp: ChildProcess, signal: NodeJS.Signals): void {
  if (cp.pid === undefined || cp.exitCode !== null || cp.signalCode !== null) return;
  try {
    process.kill(-cp.pid, signal);
  } catch {
    try {
      cp.kill(signal);
    } catch {
      // already gone
    }
  }
}

export function killAll(signal: NodeJS.Signals = 'SIGKILL'): void {
  for (const cp of live) killGroup(cp, signal);
}

process.on('exit', () => killAll('SIGKILL'));
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.on(sig, () => {
    process.stderr.write(`\nbench: ${sig}, stopping children\n`);
    killAll('SIGTERM');
    setTimeout(() => process.exit(130), 1000).unref();
  });
}

export interface SpawnOptions {
  env?: Record<string, string | undefined>;
  /** Append stdout and stderr here instead of inheriting them. */
  logFile?: string;
  ipc?: boolean;
  /** Extra node flags, e.g. --cpu-prof. */
  nodeFlags?: string[];
  /** Working directory (default: this one). */
  cwd?: string;
}

/**
 * Starts `node --import tsx <script> ...args` in its own process group with a raised fd limit
 * (10,000 SSE sockets need more than the usual 1,024). The bash wrapper `exec`s, so the pid is
 * node's own and /proc/<pid> reads the server itself.
 */
export function spawnNode(script: string, args: string[], opts: SpawnOptions = {}): ChildProcess {
  const wrapper = 'ulimit -n 65535 2>/dev/null || ulimit -n "$(ulimit -Hn)"; exec "$0" "$@"';
  const argv = [
    '-c',
    wrapper,
    process.execPath,
    ...(opts.nodeFlags ?? []),
    '--import',
    'tsx',
    script,
    ...args,
  ];
  let out: 'inherit' | 'pipe' = 'inherit';
  if (opts.logFile) out = 'pipe';
  const cp = spawn('bash', argv, {
    detached: true,
    cwd: opts.cwd,
    env: { ...process.env, ...opts.env },
    stdio: ['ignore', out, out, ...(opts.ipc ? (['ipc'] as const) : [])],
  });
  if (opts.logFile) {
    mkdirSync(dirname(opts.logFile), { recursive: true });
    const log = createWriteStream(opts.logFile, { flags: 'a' });
    cp.stdout?.pipe(log);
    cp.stderr?.pipe(log);
  }
  live.add(cp);
  cp.on('exit', () => live.delete(cp));
  return cp;
}

/** SIGTERM the group, wait for the exit (so a --cpu-prof file gets written), then SIGKILL. */
export async function stop(cp: ChildProcess, timeoutMs = 5000): Promise<void> {
  if (cp.exitCode !== null || cp.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => cp.once('exit', () => resolve()));
  killGroup(cp, 'SIGTERM');
  const timer = sleep(timeoutMs).then(() => 'timeout' as const);
  if ((await Promise.race([exited, timer])) === 'timeout') {
    killGroup(cp, 'SIGKILL');
    await exited;
  }
}

/** Polls `url` until it answers 200, the process exits, or the time is up. */
export async function waitForHttp(
  url: string,
  cp: ChildProcess | undefined,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < deadline) {
    if (cp && (cp.exitCode !== null || cp.signalCode !== null)) {
      throw new Error(`process exited (${cp.exitCode ?? cp.signalCode}) before ${url} answered`);
    }
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(1000) });
      await res.arrayBuffer();
      if (res.status === 200) return;
      last = `HTTP ${res.status}`;
    } catch (err) {
      last = (err as Error).message;
    }
    await sleep(200);
  }
  throw new Error(`${url} not ready after ${timeoutMs} ms (${last})`);
}

// ---- workers: a child that takes JSON args, exchanges messages over IPC and returns one result.

export interface WorkerMessage {
  type: string;
  [k: string]: unknown;
}

export class Worker<R> {
  readonly cp: ChildProcess;
  private inbox: WorkerMessage[] = [];
  private waiters: { type: string; resolve: (m: WorkerMessage) => void; reject: (e: Error) => void }[] = [];
  private exitError: Error | undefined;

  constructor(
    readonly name: string,
    script: string,
    args: unknown,
    opts: SpawnOptions = {},
  ) {
    this.cp = spawnNode(script, [], {
      ...opts,
      ipc: true,
      env: { ...opts.env, BENCH_ARGS: JSON.stringify(args) },
    });
    this.cp.on('message', (m) => this.deliver(m as WorkerMessage));
    this.cp.on('exit', (code, signal) => {
      this.exitError = new Error(`worker ${name} exited (${code ?? signal}) without a result`);
      for (const w of this.waiters.splice(0)) w.reject(this.exitError);
    });
  }

  private deliver(m: WorkerMessage): void {
    const i = this.waiters.findIndex((w) => w.type === m.type || (m.type === 'error' && w.type !== 'error'));
    if (i >= 0) {
      const [w] = this.waiters.splice(i, 1);
      if (m.type === 'error' && w.type !== 'error')
        w.reject(new Error(`worker ${this.name}: ${String(m.message)}`));
      else w.resolve(m);
    } else this.inbox.push(m);
  }

  send(m: WorkerMessage): void {
    // With a callback a failed send (EPIPE: the worker is already exiting) is reported there instead
    // of as an 'error' event, which would end the whole bench run.
    if (this.cp.connected) this.cp.send(m, () => {});
  }

  /** Resolves with the next message of `type` (or rejects on an `error` message, exit or time-out). */
  next(type: string, timeoutMs: number): Promise<WorkerMessage> {
    const j = this.inbox.findIndex((m) => m.type === type || m.type === 'error');
    if (j >= 0) {
      const [m] = this.inbox.splice(j, 1);
      if (m.type === 'error' && type !== 'error')
        return Promise.reject(new Error(`worker ${this.name}: ${String(m.message)}`));
      return Promise.resolve(m);
    }
    if (this.exitError) return Promise.reject(this.exitError);
    return new Promise((resolve, reject) => {
      const waiter = {
        type,
        resolve: (m: WorkerMessage) => {
          clearTimeout(timer);
          resolve(m);
        },
        reject: (e: Error) => {
          clearTimeout(timer);
          reject(e);
        },
      };
      const timer = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        reject(new Error(`worker ${this.name}: no '${type}' within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiters.push(waiter);
    });
  }

  /** CPU seconds the worker used in all, known once its result has arrived. */
  cpuSec = Number.NaN;

  async result(timeoutMs: number): Promise<R> {
    const m = await this.next('result', timeoutMs);
    this.cpuSec = Number(m['cpuSec']);
    return m.result as R;
  }

  /** Job workers (serveJobs): runs one job and returns its result; cpuSec is that job's CPU. */
  async run<J>(args: unknown, timeoutMs: number): Promise<J> {
    this.send({ type: 'run', args });
    const m = await this.next('done', timeoutMs);
    this.cpuSec = Number(m['cpuSec']);
    return m.result as J;
  }

  stop(): Promise<void> {
    this.send({ type: 'exit' });
    return stop(this.cp, 2000);
  }
}

// ---- the worker side

export function workerArgs<A>(): A {
  const raw = process.env['BENCH_ARGS'];
  if (!raw) throw new Error('BENCH_ARGS is not set: this file is started by bench/run.ts');
  return JSON.parse(raw) as A;
}

export function toParent(m: WorkerMessage): void {
  process.send?.(m);
}

/** Waits for a message of `type` from the parent. */
export function fromParent(type: string): Promise<WorkerMessage> {
  return new Promise((resolve) => {
    const on = (m: unknown) => {
      if ((m as WorkerMessage).type === type) {
        process.off('message', on);
        resolve(m as WorkerMessage);
      }
    };
    process.on('message', on);
  });
}

/** Runs a worker body: its return value goes to the parent as the result; a throw as an error. */
export function runWorker(body: () => Promise<unknown>): void {
  // A worker whose parent died has nobody to report to: leave at once.
  process.on('disconnect', () => process.exit(0));
  const finish = (m: WorkerMessage, code: number) => {
    if (process.send) process.send(m, () => process.exit(code));
    else process.exit(code);
  };
  body().then(
    (result) => {
      const cpu = process.cpuUsage();
      finish({ type: 'result', result, cpuSec: (cpu.user + cpu.system) / 1e6 }, 0);
    },
    (err: Error) => finish({ type: 'error', message: err.stack ?? String(err) }, 1),
  );
}

/** A worker that runs jobs one after another ({type:'run', args} → {type:'done', result, cpuSec}),
 * so a series of short measurements does not pay a process start-up each. */
export function serveJobs(handler: (args: unknown) => Promise<unknown>): void {
  process.on('disconnect', () => process.exit(0));
  process.on('message', (m: WorkerMessage) => {
    if (m.type === 'exit') process.exit(0);
    if (m.type !== 'run') return;
    const before = process.cpuUsage();
    handler(m['args']).then(
      (result) => {
        const d = process.cpuUsage(before);
        toParent({ type: 'done', result, cpuSec: (d.user + d.system) / 1e6 });
      },
      (err: Error) => toParent({ type: 'error', message: err.stack ?? String(err) }),
    );
  });
}
