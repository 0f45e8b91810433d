/**
 * Feed reads on a streaming standby beside the primary-only setup, in one run:
 *
 *   npx tsx bench/experiments/standby.ts [--events 300000] [--rounds 2] [--rate 500] [--subs 20] [--seconds 10] [--port 54358]
 *
 * Starts its own primary + streaming standby (test/standby-cluster.ts, ports --port and --port + 1)
 * and two commitfeed processes on the same primary: `primary` (no READ_DATABASE_URL) and `standby`
 * (READ_DATABASE_URL = the standby). Everything it starts is stopped however the run ends.
 * - Catch-up: N events preloaded by SQL into one stream, then one SSE client reads them from
 *   `earliest` (pages of PAGE_SIZE from the table, past the window); events/s, pages/s, and the CPU
 *   of each PostgreSQL cluster and of the server meanwhile. Alternated `--rounds` times.
 * - Tail latency: `--subs` SSE subscribers on one stream; a sequential publisher posts `--rate`
 *   events/s to the same server for `--seconds`; publish→receive p50/p99 (each event stamped with
 *   CLOCK_MONOTONIC when sent), and the same with the publisher on the other server (the subscriber's
 *   server is woken by NOTIFY, not by its own commit).
 * The bench process is itself the client (publisher and subscribers): the figures are ratios within
 * one run, on a 2-core machine where both clusters, both servers and the client share the cores.
 */
import http from 'node:http';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { startStandbyCluster } from '../../test/standby-cluster.ts';
import { benchFile, log } from '../lib/context.ts';
import { killAll, spawnNode, stop, waitForHttp } from '../lib/proc.ts';
import { fmtNum } from '../lib/report.ts';
import { SseConnection } from '../lib/sse-client.ts';
import { Recorder, monoMs } from '../lib/stats.ts';
import { cpuSeconds, machineBusySeconds } from '../lib/sys.ts';
import { httpPath, postJson } from '../lib/targets.ts';

const { values: v } = parseArgs({
  options: {
    events: { type: 'string', default: '300000' },
    rounds: { type: 'string', default: '2' },
    rate: { type: 'string', default: '500' },
    subs: { type: 'string', default: '20' },
    seconds: { type: 'string', default: '10' },
    port: { type: 'string', default: '54358' },
  },
});
const N = Number(v.events);
const ROUNDS = Number(v.rounds);
const RATE = Number(v.rate);
const SUBS = Number(v.subs);
const SECONDS = Number(v.seconds);
const PG_PORT = Number(v.port);
const PAGE_SIZE = 1000;

const CLK_TCK = 100;
/** CPU seconds of a PostgreSQL cluster: its postmaster, live children and reaped children. */
function clusterCpu(dataDir: string): number {
  const pm = Number(readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  let sum = 0;
  const stat = (pid: number) => {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return s.slice(s.lastIndexOf(')') + 2).split(' ');
  };
  const f = stat(pm);
  sum += (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) / CLK_TCK;
  const children = readFileSync(`/proc/${pm}/task/${pm}/children`, 'utf8')
    .trim()
    .split(/\s+/)
    .filter(Boolean);
  for (const c of children) {
    try {
      sum += cpuSeconds(Number(c));
    } catch {
      // exited meanwhile (then counted in the postmaster's reaped time)
    }
  }
  return sum;
}

interface Mark {
  at: number;
  primary: number;
  standby: number;
  server: number;
  machine: number;
}

async function main(): Promise<void> {
  const base = path.join(os.tmpdir(), `commitfeed-bench-standby-${PG_PORT}`);
  const cluster = await startStandbyCluster({ port: PG_PORT, dir: base, log });
  const servers: { name: string; port: number; cp: ReturnType<typeof spawnNode> }[] = [];
  try {
    const mark = (serverPid: number): Mark => ({
      at: performance.now(),
      primary: clusterCpu(path.join(base, 'primary')),
      standby: clusterCpu(path.join(base, 'standby')),
      server: cpuSeconds(serverPid),
      machine: machineBusySeconds(),
    });
    const cores = (a: Mark, b: Mark) => {
      const s = (b.at - a.at) / 1000;
      const f = (x: number) => (x / s).toFixed(2);
      return `${f(b.primary - a.primary)} / ${f(b.standby - a.standby)} / ${f(b.server - a.server)} / ${f(b.machine - a.machine)}`;
    };
    for (const [i, name] of ['primary', 'standby'].entries()) {
      const port = PG_PORT + 10 + i;
      const cp = spawnNode('src/main.ts', [], {
        cwd: benchFile('..'),
        env: {
          PORT: String(port),
          HOST: '127.0.0.1',
          DATABASE_URL: cluster.primaryUrl,
          READ_DATABASE_URL: name === 'standby' ? cluster.standbyUrl : '',
          LOG_LEVEL: 'warn',
          PAGE_SIZE: String(PAGE_SIZE),
        },
        logFile: benchFile(`.logs/standby-${name}.log`),
      });
      servers.push({ name, port, cp });
      // One at a time: the first start migrates.
      await waitForHttp(`http://127.0.0.1:${port}/readyz`, cp, 60_000);
    }
    log(`servers up; preloading ${fmtNum(N)} events`);
    const c = new pg.Client({ connectionString: cluster.primaryUrl });
    await c.connect();
    for (let from = 0; from < N; from += 100_000) {
      await c.query(
        `insert into commitfeed.feed (stream, type, data)
         select 'cu', 'bench', json_build_object('s', g) from generate_series($1::int, $2::int) g order by g`,
        [from, Math.min(N, from + 100_000) - 1],
      );
    }
    await c.query('analyze commitfeed.feed');
    await c.end();
    await cluster.caughtUp(120_000);
    // A commit to wake both tailers past the preload (their window starts at the horizon).
    for (const s of servers) await fetchJson(s.port, 'wake', '{"data":{}}');

    const lines: string[] = [];
    lines.push(
      '| reads on | round | catch-up events/s | pages/s | CPU cores: primary PG / standby PG / server / machine |',
      '| --- | --- | --- | --- | --- |',
    );
    for (let round = 1; round <= ROUNDS; round++) {
      for (const s of servers) {
        const a = mark(s.cp.pid!);
        const sec = await catchUp(s.port, N);
        const b = mark(s.cp.pid!);
        lines.push(
          `| ${s.name} | ${round} | ${fmtNum(N / sec)} | ${fmtNum(N / PAGE_SIZE / sec)} | ${cores(a, b)} |`,
        );
        log(`catch-up on ${s.name}: ${fmtNum(N / sec)} events/s`);
      }
    }
    lines.push(
      '',
      `| reads on | publisher on | publish→SSE p50 / p99 / max (ms) | received / expected | CPU cores: primary PG / standby PG / server / machine |`,
      '| --- | --- | --- | --- | --- |',
    );
    for (const s of servers) {
      for (const p of servers) {
        const a = mark(s.cp.pid!);
        const r = await tailLatency(s.port, p.port, `lat-${s.name}-${p.name}`);
        const b = mark(s.cp.pid!);
        lines.push(
          `| ${s.name} | ${p.name === s.name ? 'same server' : 'the other server (NOTIFY)'} | ${r.p50.toFixed(1)} / ${r.p99.toFixed(1)} / ${r.max.toFixed(1)} | ${r.received} / ${r.expected} | ${cores(a, b)} |`,
        );
        log(
          `tail on ${s.name}, publisher on ${p.name}: p50 ${r.p50.toFixed(1)} ms, p99 ${r.p99.toFixed(1)} ms`,
        );
      }
    }
    const metrics = await (await fetch(`http://127.0.0.1:${servers[1].port}/metrics`)).text();
    const pick = (name: string) =>
      new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)`, 'm').exec(metrics)?.[1] ?? '?';
    lines.push(
      '',
      `Standby server's counters: standby reads ${pick('commitfeed_standby_reads_total')}, ` +
        `primary fallbacks ${pick('commitfeed_standby_fallback_reads_total')}, ` +
        `replay waits ${pick('commitfeed_standby_replay_waits_total')}.`,
    );
    console.log(lines.join('\n'));
  } finally {
    for (const s of servers) await stop(s.cp).catch(() => {});
    await cluster.stop();
    killAll();
  }
}

function fetchJson(port: number, stream: string, body: string): Promise<{ status: number; body: string }> {
  const agent = new http.Agent({ keepAlive: false });
  return postJson(agent, port, httpPath(stream), body);
}

/** Seconds for one SSE client to read `n` events of stream `cu` from earliest. */
function catchUp(port: number, n: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let got = 0;
    let next = 0;
    const conn = new SseConnection(
      { host: '127.0.0.1', port, path: `${httpPath('cu')}?from=earliest` },
      {
        onEvent(_id, _type, data) {
          const s = (JSON.parse(data) as { s: number }).s;
          if (s !== next) {
            conn.close('order');
            reject(new Error(`catch-up on ${port}: expected s=${next}, got ${s}`));
            return;
          }
          next++;
          if (++got === n) {
            conn.close('done');
            resolve((performance.now() - t0) / 1000);
          }
        },
        onClose(reason) {
          if (got < n && reason !== 'done' && reason !== 'order')
            reject(new Error(`catch-up on ${port} closed: ${reason}`));
        },
      },
    );
  });
}

/** SUBS subscribers on `subPort`, a sequential publisher at RATE on `pubPort`. */
async function tailLatency(
  subPort: number,
  pubPort: number,
  stream: string,
): Promise<{ p50: number; p99: number; max: number; received: number; expected: number }> {
  const rec = new Recorder();
  let received = 0;
  const conns: SseConnection[] = [];
  await Promise.all(
    Array.from(
      { length: SUBS },
      () =>
        new Promise<void>((resolve) => {
          conns.push(
            new SseConnection(
              { host: '127.0.0.1', port: subPort, path: httpPath(stream) },
              {
                onPrimed: () => resolve(),
                onEvent(_id, _type, data) {
                  received++;
                  rec.add(monoMs() - (JSON.parse(data) as { t: number }).t);
                },
              },
            ),
          );
        }),
    ),
  );
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const total = RATE * SECONDS;
  const t0 = performance.now();
  let sent = 0;
  for (let i = 0; i < total; i++) {
    const due = t0 + (i * 1000) / RATE;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const res = await postJson(agent, pubPort, httpPath(stream), `{"data":{"t":${monoMs()}}}`);
    if (res.status === 201) sent++;
  }
  const deadline = Date.now() + 10_000;
  while (received < sent * SUBS && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  for (const c of conns) c.close('done');
  agent.destroy();
  const s = rec.summary();
  return { p50: s.p50, p99: s.p99, max: s.max, received, expected: sent * SUBS };
}

main().then(
  () => process.exit(0),
  (err: Error) => {
    console.error(`standby bench failed: ${err.stack ?? err.message}`);
    killAll();
    process.exit(1);
  },
);
