// HTTP load process: autocannon against one URL, closed loop (each connection sends its next
// request when the previous answer arrives). Runs in its own process so the load generator never
// shares an event loop with the server it measures. Serves one run after another (serveJobs).
import autocannon from 'autocannon';
import { serveJobs } from '../lib/proc.ts';
import { cpuSeconds, machineBusySeconds } from '../lib/sys.ts';

export interface HttpLoadArgs {
  url: string;
  body: string;
  connections: number;
  durationSec: number;
  /** Request headers (default: a JSON content type); a Mercure publish sends a form and a token. */
  headers?: Record<string, string>;
  /** Also count 2xx answers per wall-clock second from the start (the warm-up curve). */
  perSecond?: boolean;
  /** With perSecond: also read this process's CPU seconds (and the machine's) every second. */
  cpuPid?: number;
}

export interface HttpLoadResult {
  ok: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  durationSec: number;
  rps: number;
  latency: { mean: number; p50: number; p90: number; p99: number; max: number };
  bytesRead: number;
  /** 2xx answers in each second from the start, when asked for (perSecond). */
  perSecond?: number[];
  /** CPU seconds cpuPid used in each second, and the machine's busy cores in each second. */
  cpuPerSecond?: number[];
  machinePerSecond?: number[];
}

serveJobs(async (args) => {
  const a = args as HttpLoadArgs;
  const perSecond: number[] = [];
  const t0 = performance.now();
  const run = autocannon({
    url: a.url,
    method: 'POST',
    headers: a.headers ?? { 'content-type': 'application/json' },
    body: a.body,
    connections: a.connections,
    pipelining: 1,
    duration: a.durationSec,
    timeout: 10,
  }) as ReturnType<typeof autocannon> & autocannon.Instance; // without a callback it is both
  if (a.perSecond)
    run.on('response', (_client: unknown, status: number) => {
      if (status < 200 || status > 299) return;
      const i = Math.floor((performance.now() - t0) / 1000);
      while (perSecond.length <= i) perSecond.push(0);
      perSecond[i] += 1;
    });
  const cpuPerSecond: number[] = [];
  const machinePerSecond: number[] = [];
  let last = { cpu: a.cpuPid ? cpuSeconds(a.cpuPid) : 0, machine: machineBusySeconds() };
  const sampler = a.perSecond
    ? setInterval(() => {
        const now = { cpu: a.cpuPid ? cpuSeconds(a.cpuPid) : 0, machine: machineBusySeconds() };
        cpuPerSecond.push(now.cpu - last.cpu);
        machinePerSecond.push(now.machine - last.machine);
        last = now;
      }, 1000)
    : undefined;
  let r: autocannon.Result;
  try {
    r = await run;
  } finally {
    clearInterval(sampler);
  }
  const ok = r['2xx'];
  const result: HttpLoadResult = {
    ok,
    non2xx: r.non2xx,
    errors: r.errors,
    timeouts: r.timeouts,
    durationSec: r.duration,
    rps: ok / r.duration,
    latency: {
      mean: r.latency.mean,
      p50: r.latency.p50,
      p90: r.latency.p90,
      p99: r.latency.p99,
      max: r.latency.max,
    },
    bytesRead: r.throughput.total,
    ...(a.perSecond
      ? {
          perSecond: perSecond.slice(0, Math.floor(a.durationSec)),
          cpuPerSecond: a.cpuPid ? cpuPerSecond : undefined,
          machinePerSecond,
        }
      : {}),
  };
  return result;
});
