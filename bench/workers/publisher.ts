// Publisher process. Modes:
//   closed      N loops, each publishing as soon as its previous publish is acknowledged (the
//               throughput runs for NATS and Redis; HTTP throughput uses autocannon instead)
//   rate        open loop at a fixed rate, round-robin over streams, for the latency scenarios;
//               every payload carries {t: CLOCK_MONOTONIC ms at send, s: per-stream sequence}
//   sequential  like rate, but one publish at a time, so commit order = sequence order
// `rate` and `sequential` run until the duration ends or the parent sends {type:'stop'}.
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { connect, type JetStreamClient, type NatsConnection } from 'nats';
import { fromParent, runWorker, serveJobs, toParent, workerArgs } from '../lib/proc.ts';
import { RawPoster } from '../lib/raw-post.ts';
import { monoMs, Recorder } from '../lib/stats.ts';
import {
  httpPath,
  MERCURE_PATH,
  mercureForm,
  natsSubject,
  REDIS_PORT,
  redisKey,
  type Target,
} from '../lib/targets.ts';

export interface PublisherArgs {
  target: Target;
  mode: 'closed' | 'rate' | 'sequential';
  streams: string[];
  durationSec: number;
  /** closed: concurrent loops. */
  concurrency?: number;
  /** rate/sequential: events per second over all streams. */
  rate?: number;
  /** First sequence number per stream (catch-up continues after preloaded events). */
  firstSeq?: number;
  /** Extra payload bytes, to size events. */
  padBytes?: number;
  label?: string;
}

export interface PublisherResult {
  published: Record<string, number>;
  /** Per stream: the sequence number the next event would have had (all below were attempted). */
  nextSeq: Record<string, number>;
  /** Per stream: sequence numbers whose publish failed (or timed out: it may still have committed). */
  failedSeqs: Record<string, number[]>;
  total: number;
  errors: number;
  firstError?: string;
  elapsedSec: number;
  latency: ReturnType<Recorder['summary']>;
  /** rate mode: sends that had to wait because too many were in flight. */
  throttled: number;
}

type PublishFn = (stream: string, payload: string) => Promise<void>;

async function makePublisher(
  target: Target,
  connections: number,
): Promise<{ publish: PublishFn; close(): Promise<void> }> {
  if (target.kind === 'http' || target.kind === 'mercure') {
    // Raw keep-alive sockets, not node:http: see bench/lib/raw-post.ts (the load generator's CPU is
    // taken from the server it measures).
    const poster = new RawPoster(target.port!, connections);
    const query = target.query ?? '';
    const mercure = target.kind === 'mercure';
    const auth = mercure ? `Authorization: Bearer ${target.token ?? ''}\r\n` : '';
    return {
      async publish(stream, payload) {
        const res = mercure
          ? await poster.post(
              MERCURE_PATH,
              mercureForm(stream, payload),
              'application/x-www-form-urlencoded',
              auth,
            )
          : await poster.post(httpPath(stream) + query, `{"type":"bench","data":${payload}}`);
        const ok = mercure ? 200 : 201;
        if (res.status !== ok) throw new Error(`HTTP ${res.status}: ${res.body.slice(0, 200)}`);
      },
      async close() {
        poster.close();
      },
    };
  }
  if (target.kind === 'nats') {
    const nc: NatsConnection = await connect({ servers: '127.0.0.1:4222', maxReconnectAttempts: 0 });
    const js: JetStreamClient = nc.jetstream();
    const enc = new TextEncoder();
    return {
      async publish(stream, payload) {
        await js.publish(natsSubject(stream), enc.encode(payload));
      },
      async close() {
        await nc.close();
      },
    };
  }
  const n = Math.max(1, Math.min(connections, 8));
  const clients = Array.from(
    { length: n },
    () => new Redis({ host: '127.0.0.1', port: REDIS_PORT, lazyConnect: true, maxRetriesPerRequest: 1 }),
  );
  await Promise.all(clients.map((c) => c.connect()));
  let next = 0;
  return {
    async publish(stream, payload) {
      const c = clients[next++ % n];
      await c.xadd(redisKey(stream), '*', 'd', payload);
    },
    async close() {
      await Promise.all(clients.map((c) => c.quit()));
    },
  };
}

async function publish(a: PublisherArgs): Promise<PublisherResult> {
  const concurrency = a.mode === 'closed' ? (a.concurrency ?? 1) : a.mode === 'sequential' ? 1 : 64;
  const pub = await makePublisher(a.target, concurrency);
  const pad = a.padBytes ? 'x'.repeat(a.padBytes) : '';
  const seq = new Map<string, number>(a.streams.map((s) => [s, a.firstSeq ?? 0]));
  const published: Record<string, number> = Object.fromEntries(a.streams.map((s) => [s, 0]));
  const lat = new Recorder();
  let errors = 0;
  let firstError: string | undefined;
  const failedSeqs: Record<string, number[]> = Object.fromEntries(a.streams.map((s) => [s, []]));
  let throttled = 0;
  let stopped = false;
  if (a.mode !== 'closed')
    void fromParent('stop').then(() => {
      stopped = true;
    });
  const started = monoMs();
  const deadline = started + a.durationSec * 1000;
  let rr = 0;

  const one = async (stream: string) => {
    const s = seq.get(stream)!;
    seq.set(stream, s + 1);
    const t = monoMs();
    const payload = pad ? `{"t":${t},"s":${s},"p":"${pad}"}` : `{"t":${t},"s":${s}}`;
    try {
      await pub.publish(stream, payload);
      lat.add(monoMs() - t);
      published[stream]++;
    } catch (err) {
      errors++;
      firstError ??= (err as Error).message;
      failedSeqs[stream].push(s);
    }
  };

  if (a.mode !== 'closed') toParent({ type: 'started' });
  if (a.mode === 'closed') {
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (!stopped && monoMs() < deadline) await one(a.streams[rr++ % a.streams.length]);
      }),
    );
  } else {
    const rate = a.rate ?? 100;
    const inflight = new Set<Promise<void>>();
    const maxInflight = a.mode === 'sequential' ? 1 : 256;
    let sent = 0;
    while (!stopped && monoMs() < deadline) {
      const due = Math.floor(((monoMs() - started) / 1000) * rate);
      while (sent < due && !stopped) {
        if (inflight.size >= maxInflight) {
          throttled++;
          await Promise.race(inflight);
          continue;
        }
        const p = one(a.streams[rr++ % a.streams.length]).finally(() => inflight.delete(p));
        inflight.add(p);
        sent++;
      }
      await sleep(1);
    }
    await Promise.all(inflight);
  }
  const elapsedSec = (monoMs() - started) / 1000;
  await pub.close();
  const total = Object.values(published).reduce((x, y) => x + y, 0);
  const result: PublisherResult = {
    published,
    nextSeq: Object.fromEntries(seq),
    failedSeqs,
    total,
    errors,
    firstError,
    elapsedSec,
    latency: lat.summary(),
    throttled,
  };
  return result;
}

// Closed-loop runs come as a series of jobs; the latency scenarios start one publisher per run.
if (process.env['BENCH_JOBS']) serveJobs((args) => publish(args as PublisherArgs));
else runWorker(() => publish(workerArgs<PublisherArgs>()));
