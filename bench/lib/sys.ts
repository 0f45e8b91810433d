// Machine facts and process readings from /proc (Linux only, like the machines this runs on).
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';

const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;
  } catch {
    return 100;
  }
})();

/** CPU seconds (user + system) a process has used so far, or NaN when it is gone. */
export function cpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
  } catch {
    return Number.NaN;
  }
}

/** `pid` and every live descendant (a WORKERS=N server is a primary and its workers). */
export function processTree(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const list = children.get(ppid) ?? [];
      list.push(Number(d));
      children.set(ppid, list);
    } catch {
      // exited meanwhile
    }
  }
  const out: number[] = [];
  for (const queue = [pid]; queue.length > 0; ) {
    const p = queue.pop()!;
    out.push(p);
    queue.push(...(children.get(p) ?? []));
  }
  return out;
}

/** CPU seconds of a process and its live descendants (NaN when the process itself is gone). */
export function treeCpuSeconds(pid: number): number {
  let sum = 0;
  for (const p of processTree(pid)) {
    const c = cpuSeconds(p);
    if (Number.isNaN(c)) {
      if (p === pid) return c;
      continue;
    }
    sum += c;
  }
  return sum;
}

/** Resident memory in KiB of a process and its live descendants. */
export function treeRssKiB(pid: number): number {
  let sum = 0;
  for (const p of processTree(pid)) {
    const r = rssKiB(p);
    if (!Number.isNaN(r)) sum += r;
  }
  return sum;
}

/** Pids whose command name is `comm` (e.g. every postgres backend). */
export function pidsByName(comm: string): number[] {
  const out: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      if (readFileSync(`/proc/${d}/comm`, 'utf8').trim() === comm) out.push(Number(d));
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

/** Total CPU seconds of the processes named `comm` and of their exited children. A backend that
 * exits is reaped by the postmaster, whose cutime/cstime then hold its seconds, so the sum does
 * not drop when connections close. */
export function cpuSecondsByName(comm: string): number {
  let sum = 0;
  const pids = pidsByName(comm);
  const set = new Set(pids);
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      // f[1] is the parent pid; children's times count once, at the top process of the tree
      const parentIsSame = set.has(Number(f[1]));
      sum += (Number(f[11]) + Number(f[12]) + (parentIsSame ? 0 : Number(f[13]) + Number(f[14]))) / CLK_TCK;
    } catch {
      // exited meanwhile
    }
  }
  return sum;
}

/** Resident memory in KiB (VmRSS), or NaN. */
export function rssKiB(pid: number): number {
  try {
    const m = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : Number.NaN;
  } catch {
    return Number.NaN;
  }
}

/** Whole-machine busy CPU seconds so far (all cores), from /proc/stat. */
export function machineBusySeconds(): number {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0];
  const v = line.trim().split(/\s+/).slice(1).map(Number);
  const idle = v[3] + (v[4] ?? 0);
  const total = v.reduce((x, y) => x + y, 0);
  return (total - idle) / CLK_TCK;
}

export interface CpuMark {
  at: number;
  server: number;
  postgres: number;
  /** Per backend, when only one database's backends are counted. */
  postgresByPid?: Map<number, number>;
  machine: number;
  extra: number;
}

/** Samples CPU seconds of the server, all postgres processes, the machine, and any extra pids. */
let benchDb = '';
/** Makes cpuMark count only the PostgreSQL backends of this database (see postgresCpuSeconds). */
export function setBenchDatabase(db: string): void {
  benchDb = db;
}

export function cpuMark(serverPid: number | undefined, extraPids: number[] = []): CpuMark {
  let extra = 0;
  for (const p of extraPids) {
    const c = cpuSeconds(p);
    if (!Number.isNaN(c)) extra += c;
  }
  return {
    at: performance.now(),
    // The whole tree: with WORKERS=N the server's work is done by the primary's children.
    server: serverPid ? treeCpuSeconds(serverPid) : 0,
    postgres: benchDb ? 0 : cpuSecondsByName('postgres'),
    postgresByPid: benchDb ? postgresCpuSeconds(benchDb) : undefined,
    machine: machineBusySeconds(),
    extra,
  };
}

/** Postgres CPU seconds between two marks. Per backend when known: a backend that started meanwhile
 * counts whole, one that exited meanwhile loses only its last seconds (never a negative total).
 * `backendsOnly`: the bench database's client backends, without the cluster's background processes
 * (which also work for every other database of a shared server). */
export function pgDelta(a: CpuMark, b: CpuMark, backendsOnly = false): number {
  if (!a.postgresByPid || !b.postgresByPid) return b.postgres - a.postgres;
  let sum = 0;
  for (const [pid, sec] of b.postgresByPid) {
    if (backendsOnly && !clientBackends.has(pid)) continue;
    sum += Math.max(0, sec - (a.postgresByPid.get(pid) ?? 0));
  }
  return sum;
}

/** Cores used between two marks: server, postgres, the whole machine, extra pids. */
export function coresUsed(
  a: CpuMark,
  b: CpuMark,
): { server: number; postgres: number; machine: number; extra: number } {
  const sec = (b.at - a.at) / 1000;
  return {
    server: (b.server - a.server) / sec,
    postgres: pgDelta(a, b) / sec,
    machine: (b.machine - a.machine) / sec,
    extra: (b.extra - a.extra) / sec,
  };
}

export function machineFacts(): Record<string, string> {
  const cpus = os.cpus();
  return {
    cores: String(cpus.length),
    cpu: cpus[0]?.model ?? 'unknown',
    memory: `${Math.round(os.totalmem() / 2 ** 30)} GiB`,
    kernel: `${os.type()} ${os.release()}`,
    node: process.version,
  };
}

/** Cores busy on the whole machine over `ms`: what else is running before a bench starts. */
export async function machineBusyCores(ms = 1000): Promise<number> {
  const a = machineBusySeconds();
  const t = performance.now();
  await new Promise((r) => setTimeout(r, ms));
  return (machineBusySeconds() - a) / ((performance.now() - t) / 1000);
}

/** Pids seen as client backends of the bench database (pgDelta's `backendsOnly`). */
const clientBackends = new Set<number>();

/**
 * CPU seconds of the PostgreSQL processes working for `db`: its live backends plus the cluster's
 * background processes (WAL writer, checkpointer, ...). Backends of other databases (other users of
 * a shared server) are left out, and so are exited backends, whose time the postmaster only keeps
 * for all databases together: sample while a run's connections are open.
 */
export function postgresCpuSeconds(db: string): Map<number, number> {
  const out = new Map<number, number>();
  for (const pid of pidsByName('postgres')) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ').trim();
      // "postgres: 15/main: <user> <db> <host(port)> <state>" for a client backend
      const m = /^postgres: \S+: (\S+) (\S+) (\S+\(\d+\)|\[local\])/.exec(cmd);
      if (m && m[2] !== db) continue;
      if (m) clientBackends.add(pid);
      const c = cpuSeconds(pid);
      if (!Number.isNaN(c)) out.set(pid, c);
    } catch {
      // exited meanwhile
    }
  }
  return out;
}
