// What SSE readers that never read cost the service, before and after the slow-reader bound
// (src/feed/slow-readers.ts), in one run: each source tree given is started as its own server
// process (`node --import tsx src/main.ts`, default settings unless SLOW_ENV adds some), N raw
// sockets connect, ask for one of four streams and never read, eight readers read everything, and
// events are published for `--publish` seconds; then it watches until every stalled reader is gone
// (or `--watch` seconds). Sampled every 200 ms: the server's RSS (/proc/<pid>/status), the sum of
// its sockets' kernel send queues (/proc/net/tcp, by the server's port), and the host's TCP memory
// (/proc/net/sockstat, every socket of the host: the stalled clients' receive buffers too).
//
// npx tsx bench/experiments/slow-readers.ts --db wt_readers_bench --port 14160 --readers 2000 /work/main /work/wt-readers
// (DATABASE_URL names the admin database of the PostgreSQL to use; `--db`_N is made afresh for tree N.)
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { parseEnvList } from '../lib/options.ts';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    db: { type: 'string', default: 'commitfeed_bench_slow' },
    port: { type: 'string', default: '14160' },
    readers: { type: 'string', default: '2000' },
    publish: { type: 'string', default: '10' },
    watch: { type: 'string', default: '45' },
    'event-bytes': { type: 'string', default: '4096' },
  },
});
const N = Number(values.readers);
const PORT = Number(values.port);
const STREAMS = ['bench-a', 'bench-b', 'bench-c', 'bench-d'];
const MiB = 1024 * 1024;
const PAGE = 4096;
const admin = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

/** A fresh database for each tree (their migrations may differ): `--db` with the tree's number. */
async function freshDb(n: number): Promise<string> {
  const name = `${values.db}_${n}`;
  const c = new pg.Client(admin);
  await c.connect();
  await c.query(`drop database if exists ${name}`);
  await c.query(`create database ${name}`);
  await c.end();
  const url = new URL(admin);
  url.pathname = `/${name}`;
  return url.toString();
}

function startServer(root: string, databaseUrl: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    cwd: root,
    env: {
      ...process.env,
      PORT: String(PORT),
      HOST: '127.0.0.1',
      DATABASE_URL: databaseUrl,
      LOG_LEVEL: 'warn',
      SELF_CHECK_INTERVAL: '0',
      ...parseEnvList(process.env.SLOW_ENV ?? '', ' '),
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let log = '';
  child.stdout!.on('data', (d) => {
    log += String(d);
  });
  return new Promise((resolve, reject) => {
    const poll = setInterval(async () => {
      try {
        if ((await fetch(`http://127.0.0.1:${PORT}/healthz`)).ok) {
          clearInterval(poll);
          resolve(child);
        }
      } catch {}
    }, 200);
    child.once('exit', (code) => {
      clearInterval(poll);
      reject(new Error(`server exited ${code}: ${log.slice(-2000)}`));
    });
  });
}

function rssOf(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : 0;
}

function cpuOf(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(f[11]) + Number(f[12])) / 100; // utime + stime, seconds
}

/** The server's sockets (not its listener): count, sum of send queues, and how many are not ESTABLISHED. */
function serverQueues(): { sockets: number; queued: number; closing: number } {
  const local = `:${PORT.toString(16).toUpperCase().padStart(4, '0')}`;
  let sockets = 0;
  let queued = 0;
  let closing = 0;
  for (const line of readFileSync('/proc/net/tcp', 'latin1').split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f.length < 10 || !f[1]!.endsWith(local) || f[3] === '0A') continue;
    sockets++;
    queued += Number.parseInt(f[4]!.split(':')[0]!, 16);
    if (f[3] !== '01') closing++;
  }
  return { sockets, queued, closing };
}

function hostTcpMem(): number {
  const m = /TCP: .* mem (\d+)/.exec(readFileSync('/proc/net/sockstat', 'utf8'));
  return m ? Number(m[1]) * PAGE : 0;
}

function stalledReader(stream: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const sock = net.connect(PORT, '127.0.0.1');
    sock.pause();
    sock.on('error', () => {});
    sock.once('connect', () => {
      sock.write(`GET /v1/streams/${stream}/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n`);
      resolve(sock);
    });
    sock.once('error', reject);
  });
}

async function reader(stream: string, counts: Map<string, number>, abort: AbortSignal): Promise<void> {
  const res = await fetch(`http://127.0.0.1:${PORT}/v1/streams/${stream}/events`, {
    headers: { accept: 'text/event-stream' },
    signal: abort,
  });
  void (async () => {
    try {
      const dec = new TextDecoder();
      for await (const chunk of res.body!) {
        const n = (dec.decode(chunk as Uint8Array, { stream: true }).match(/^data: /gm) ?? []).length;
        counts.set(stream, (counts.get(stream) ?? 0) + n);
      }
    } catch {}
  })();
}

async function phase(root: string, databaseUrl: string) {
  const server = await startServer(root, databaseUrl);
  const pid = server.pid!;
  const abort = new AbortController();
  const got = new Map<string, number>();
  for (const s of STREAMS) for (let i = 0; i < 2; i++) await reader(s, got, abort.signal);
  await new Promise((r) => setTimeout(r, 500));
  const base = { rss: rssOf(pid), tcp: hostTcpMem(), cpu: cpuOf(pid) };
  const socks: net.Socket[] = [];
  for (let i = 0; i < N; i += 100) {
    const batch = Array.from({ length: Math.min(100, N - i) }, (_, j) =>
      stalledReader(STREAMS[(i + j) % 4]!),
    );
    socks.push(...(await Promise.all(batch)));
  }
  const connected = { rss: rssOf(pid), at: Date.now() };
  const peak = { rss: 0, queued: 0, sum: 0, tcp: 0 };
  let lastStalled = N;
  const sample = () => {
    const rss = rssOf(pid);
    const q = serverQueues();
    const tcp = hostTcpMem();
    peak.rss = Math.max(peak.rss, rss);
    peak.queued = Math.max(peak.queued, q.queued);
    peak.sum = Math.max(peak.sum, rss - base.rss + q.queued);
    peak.tcp = Math.max(peak.tcp, tcp - base.tcp);
    lastStalled = Math.max(0, q.sockets - 8);
    return q;
  };
  const timer = setInterval(sample, 200);
  const data = 'x'.repeat(Number(values['event-bytes']));
  const started = Date.now();
  let published = 0;
  while (Date.now() - started < Number(values.publish) * 1000) {
    await Promise.all(
      STREAMS.map(async (s) => {
        const res = await fetch(`http://127.0.0.1:${PORT}/v1/streams/${s}/events`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(Array.from({ length: 20 }, (_, i) => ({ data: { i, data } }))),
        });
        if (res.status !== 201) throw new Error(`publish: ${res.status}`);
        await res.arrayBuffer();
        published += 20;
      }),
    );
    await new Promise((r) => setTimeout(r, 50));
  }
  const publishedAt = Date.now();
  while (lastStalled > 0 && Date.now() - publishedAt < Number(values.watch) * 1000) {
    await new Promise((r) => setTimeout(r, 200));
  }
  clearInterval(timer);
  const end = sample();
  const metrics = await (await fetch(`http://127.0.0.1:${PORT}/metrics`)).text();
  const pick = (name: string) =>
    metrics
      .split('\n')
      .filter((l) => l.startsWith(name))
      .join('; ');
  const cpu = cpuOf(pid) - base.cpu;
  const readersGot = [...got.values()].reduce((a, b) => a + b, 0);
  abort.abort();
  for (const s of socks) s.destroy();
  server.kill('SIGTERM');
  await new Promise((r) => server.once('exit', r));
  return {
    root,
    baseRssMiB: +(base.rss / MiB).toFixed(1),
    connectionsMiB: +((connected.rss - base.rss) / MiB).toFixed(1),
    peakRssMiB: +(peak.rss / MiB).toFixed(1),
    peakKernelQueuesMiB: +(peak.queued / MiB).toFixed(1),
    peakRssGrowthPlusQueuesMiB: +(peak.sum / MiB).toFixed(1),
    peakHostTcpGrowthMiB: +(peak.tcp / MiB).toFixed(1),
    allDroppedAfterPublishMs: lastStalled === 0 ? Date.now() - publishedAt : null,
    stalledLeft: lastStalled,
    closingSocketsAtEnd: end.closing,
    eventsPerStream: published / 4,
    readersGotAll: readersGot === published * 2,
    serverCpuS: cpu,
    metrics: [
      pick('commitfeed_sse_slow_dropped_total'),
      pick('commitfeed_sse_sweep'),
      pick('commitfeed_sse_in_flight_bytes'),
    ].filter(Boolean),
  };
}

console.log(
  `load ${readFileSync('/proc/loadavg', 'utf8').trim()}; ulimit -n ${execFileSync('sh', ['-c', 'ulimit -n']).toString().trim()}; ${N} stalled readers`,
);
for (const [n, root] of (positionals.length > 0 ? positionals : ['.']).entries()) {
  console.log(JSON.stringify(await phase(root, await freshDb(n)), null, 1));
  console.log(`load ${readFileSync('/proc/loadavg', 'utf8').trim()}`);
}
