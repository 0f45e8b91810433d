// Webhooks against a bare fetch loop, one run: `npx tsx bench/experiments/webhooks.ts --db wt_bench --port 20160
// --receiver-port 20161 [--events 5000] [--concurrency 32] [--rate 100] [--seconds 10]`.
// Drops and creates the database on DATABASE_ADMIN_URL (default postgres://postgres@127.0.0.1:5432/
// postgres), starts commitfeed (`src/main.ts`, WEBHOOK_ALLOW_ADDRESSES=127.0.0.1) and the receiver
// (bench/peers/webhook-receiver.ts) as their own processes, then measures, against the same receiver:
//   throughput: `events` events committed in batches of 100 as fast as they go, until the receiver
//     has every one (deliveries/s; commitfeed's CPU per delivery from /proc), for a concurrent
//     endpoint (up to `concurrency` in flight) and an ordered one; the yardstick is a loop of
//     `concurrency` fetch() calls posting the same signed bodies (this process's CPU per post);
//   latency: single events published at `rate`/s for `seconds`, commit → receiver p50/p99 (each
//     event's data holds `t`, its send time), against the fetch loop posting at the same rate.
// Prints a Markdown table and /proc/loadavg; writes nothing (record it in bench/RESULTS.md by hand).
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { signatures } from '../../src/webhooks/signing.ts';
import { spawnNode, stop, waitForHttp } from '../lib/proc.ts';

const { values: o } = parseArgs({
  options: {
    db: { type: 'string', default: 'commitfeed_bench_webhooks' },
    port: { type: 'string', default: '20160' },
    'receiver-port': { type: 'string', default: '20161' },
    events: { type: 'string', default: '5000' },
    concurrency: { type: 'string', default: '32' },
    rate: { type: 'string', default: '100' },
    seconds: { type: 'string', default: '10' },
    'no-write': { type: 'boolean', default: true },
  },
});
const N = Number(o.events);
const C = Number(o.concurrency);
const ADMIN = process.env.DATABASE_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const CF = `http://127.0.0.1:${o.port}`;
const RX = `http://127.0.0.1:${o['receiver-port']}`;
const now = () => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function cpuMs(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
}

async function json(url: string, method = 'GET', body?: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(url, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${url}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : {};
}

type Stats = { count: number; distinct: number; p50: number; p99: number; first: number; last: number };
const stats = (run: string) => json(`${RX}/stats/${run}`) as Promise<unknown> as Promise<Stats>;

async function waitFor(run: string, n: number): Promise<Stats> {
  const deadline = Date.now() + 300_000;
  for (;;) {
    const s = await stats(run);
    if (s.distinct >= n) return s;
    if (Date.now() > deadline) throw new Error(`${run}: ${s.distinct} of ${n} after 300 s`);
    await sleep(20);
  }
}

async function endpoint(name: string, mode: 'ordered' | 'concurrent', stream: string): Promise<void> {
  await json(`${CF}/v1/webhooks`, 'POST', {
    name,
    url: `${RX}/r/${name}`,
    streams: [stream],
    mode,
    ...(mode === 'concurrent' ? { concurrency: C } : {}),
  });
}

/** Commits `n` events to `stream` in batches of 100, as fast as they go. */
async function publishBurst(stream: string, n: number): Promise<void> {
  for (let i = 0; i < n; i += 100) {
    const batch = Array.from({ length: Math.min(100, n - i) }, (_, j) => ({
      type: 'b',
      data: { t: now(), n: i + j },
    }));
    await json(`${CF}/v1/streams/${stream}/events`, 'POST', batch);
  }
}

async function throughput(cfPid: number, name: string, mode: 'ordered' | 'concurrent', n: number) {
  await endpoint(name, mode, name);
  const c0 = cpuMs(cfPid);
  const t0 = now();
  await publishBurst(name, n);
  const s = await waitFor(name, n);
  const ms = now() - t0;
  return { perSec: (n / ms) * 1000, cpuUs: ((cpuMs(cfPid) - c0) * 1000) / n, dup: s.count - s.distinct };
}

/** The yardstick: `C` fetch() loops posting signed bodies like commitfeed's. */
async function bareThroughput(run: string, n: number) {
  const secret = `whsec_${Buffer.alloc(32, 7).toString('base64')}`;
  let next = 0;
  const c0 = process.cpuUsage();
  const t0 = now();
  await Promise.all(
    Array.from({ length: C }, async () => {
      for (let i = next++; i < n; i = next++) await post(run, secret, i);
    }),
  );
  await waitFor(run, n);
  const u = process.cpuUsage(c0);
  return { perSec: (n / (now() - t0)) * 1000, cpuUs: (u.user + u.system) / n };
}

async function post(run: string, secret: string, i: number): Promise<void> {
  const id = `bare-${i}`;
  const body = JSON.stringify({
    type: 'b',
    stream: run,
    id,
    time: new Date().toISOString(),
    data: { t: now(), n: i },
  });
  const ts = Math.floor(Date.now() / 1000);
  const res = await fetch(`${RX}/r/${run}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'webhook-id': id,
      'webhook-timestamp': String(ts),
      'webhook-signature': signatures([secret], id, ts, body),
    },
    body,
  });
  await res.arrayBuffer();
}

/** Single events at `rate`/s for `seconds`: through commitfeed, or posted directly (bare). */
async function latency(run: string, bare: boolean) {
  const rate = Number(o.rate);
  const total = rate * Number(o.seconds);
  if (!bare) await endpoint(run, 'concurrent', run);
  const secret = `whsec_${Buffer.alloc(32, 7).toString('base64')}`;
  const t0 = now();
  const sent: Promise<unknown>[] = [];
  for (let i = 0; i < total; i++) {
    const due = t0 + (i * 1000) / rate;
    const wait = due - now();
    if (wait > 0) await sleep(wait);
    sent.push(
      bare
        ? post(run, secret, i)
        : json(`${CF}/v1/streams/${run}/events`, 'POST', { data: { t: now(), n: i } }),
    );
  }
  await Promise.all(sent);
  return waitFor(run, total);
}

async function main(): Promise<void> {
  const admin = new pg.Client({ connectionString: ADMIN });
  await admin.connect();
  await admin.query(`drop database if exists ${o.db} with (force)`);
  await admin.query(`create database ${o.db}`);
  const dbUrl = ADMIN.replace(/\/[^/]*$/, `/${o.db}`);
  const rx = spawnNode('bench/peers/webhook-receiver.ts', [], { env: { PORT: o['receiver-port'] } });
  const cf = spawnNode('src/main.ts', [], {
    env: {
      DATABASE_URL: dbUrl,
      PORT: o.port,
      HOST: '127.0.0.1',
      WORKERS: '1',
      LOG_LEVEL: 'warn',
      WEBHOOK_ALLOW_ADDRESSES: '127.0.0.1',
    },
  });
  try {
    await waitForHttp(`${CF}/readyz`, cf, 60_000);
    await waitForHttp(`${RX}/stats/x`, rx, 30_000);
    const load0 = readFileSync('/proc/loadavg', 'utf8').trim();
    // Warm-up: plans, connections, JIT of both paths.
    await throughput(cf.pid!, 'warm', 'concurrent', 500);
    await bareThroughput('warm-bare', 500);
    const conc = await throughput(cf.pid!, 'conc', 'concurrent', N);
    const bare = await bareThroughput('bare', N);
    const ord = await throughput(cf.pid!, 'ord', 'ordered', Math.min(N, 2000));
    const lat = await latency('lat', false);
    const latBare = await latency('lat-bare', true);
    const load1 = readFileSync('/proc/loadavg', 'utf8').trim();
    const f = (x: number, d = 0) => x.toFixed(d);
    console.log(`| what | commitfeed webhooks | bare fetch loop | ratio |
|---|---|---|---|
| deliveries/s, concurrent (${C} in flight), ${N} events | ${f(conc.perSec)} | ${f(bare.perSec)} | ${f(conc.perSec / bare.perSec, 2)} |
| CPU µs per delivery (commitfeed process / bare loop process) | ${f(conc.cpuUs)} | ${f(bare.cpuUs)} | ${f(conc.cpuUs / bare.cpuUs, 2)} |
| deliveries/s, ordered (1 in flight), ${Math.min(N, 2000)} events | ${f(ord.perSec)} | | |
| commit → receiver p50 ms at ${o.rate}/s | ${f(lat.p50, 2)} | ${f(latBare.p50, 2)} | ${f(lat.p50 / latBare.p50, 2)} |
| commit → receiver p99 ms at ${o.rate}/s | ${f(lat.p99, 2)} | ${f(latBare.p99, 2)} | ${f(lat.p99 / latBare.p99, 2)} |

duplicates (redelivered ids): concurrent ${conc.dup}, ordered ${ord.dup}
loadavg before: ${load0}; after: ${load1}`);
  } finally {
    await Promise.all([stop(cf), stop(rx)]);
    await admin.query(`drop database if exists ${o.db} with (force)`);
    await admin.end();
  }
}

await main();
