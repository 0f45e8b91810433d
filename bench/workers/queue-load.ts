// One queue system's client in a process of its own (bench/queues.ts starts one per system and sends
// it measures to run one after another). Each system is driven through its own API as its users
// would write it: commitfeed over HTTP (fetch, keep-alive), commitfeed through its library and SQL
// functions (enqueue via src/index.ts, claim and ack via the same statements the server runs),
// pg-boss 10 (send / insert / work), graphile-worker 0.17 (addJob / addJobs / run).
import { Agent } from 'node:http';
import { performance } from 'node:perf_hooks';
import { Logger, makeWorkerUtils, type Runner, run as runGraphile, type WorkerUtils } from 'graphile-worker';
import PgBoss from 'pg-boss';
import { sql } from 'kysely';
import { createDatabase } from '../../src/db/database.ts';
import { enqueue as cfEnqueue, enqueueMany as cfEnqueueMany } from '../../src/index.ts';
import { claimJobs } from '../../src/queues/claim.ts';
import { ackJobs } from '../../src/queues/settle.ts';
import { serveJobs, workerArgs } from '../lib/proc.ts';
import { postJson } from '../lib/targets.ts';

export type System = 'commitfeed-http' | 'commitfeed-sql' | 'pg-boss' | 'graphile-worker';

export interface LoadArgs {
  system: System;
  databaseUrl: string;
  /** commitfeed's base URL (commitfeed-http). */
  baseUrl: string;
  /** Connections each library may open. */
  poolSize: number;
}

export type Measure =
  | { kind: 'enqueue'; queue: string; senders: number; batch: number; seconds: number }
  | { kind: 'preload'; queue: string; jobs: number }
  | { kind: 'process'; queue: string; workers: number; jobs: number; timeoutSec: number }
  | { kind: 'latency'; queue: string; workers: number; jobs: number; rate: number }
  /** Deletes the queue's jobs (whatever their state), so later measures start on equal tables. */
  | { kind: 'purge'; queue: string };

export interface MeasureResult {
  /** jobs/s (enqueue, process), or NaN. */
  rate: number;
  /** latency samples summary (ms) */
  p50?: number;
  p99?: number;
  done: number;
  note?: string;
}

interface Adapter {
  enqueue(queue: string, payloads: object[]): Promise<void>;
  /** Runs `workers` consumers until `jobs` jobs were handled; returns when done. `onJob` gets each payload. */
  consume(
    queue: string,
    workers: number,
    batch: number,
    jobs: number,
    onJob: (p: { t?: number }) => void,
  ): Promise<void>;
  /** Removes every job of `queue`. */
  purge(queue: string): Promise<void>;
  close(): Promise<void>;
}

const args = workerArgs<LoadArgs>();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function pct(xs: number[], p: number): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

/** Counts handled jobs; resolves `done` at `target`. */
function counter(target: number) {
  let n = 0;
  let resolve!: () => void;
  const done = new Promise<void>((r) => {
    resolve = r;
  });
  return {
    add(k: number) {
      n += k;
      if (n >= target) resolve();
    },
    get n() {
      return n;
    },
    done,
  };
}

async function http(): Promise<Adapter> {
  // node:http with a keep-alive agent: an HTTP client costs the load process far less CPU per request
  // than fetch (undici), CPU the server under test would otherwise lose on this shared machine.
  const port = Number(new URL(args.baseUrl).port);
  const agent = new Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY });
  const post = async (path: string, body: unknown) => {
    const res = await postJson(agent, port, path, JSON.stringify(body));
    if (res.status >= 300) throw new Error(`${path}: ${res.status} ${res.body.slice(0, 200)}`);
    return res.body === '' ? undefined : JSON.parse(res.body);
  };
  const sqlAdapter = await library();
  return {
    async enqueue(queue, payloads) {
      await post(
        `/v1/queues/${queue}/jobs`,
        payloads.length === 1 ? { payload: payloads[0] } : payloads.map((p) => ({ payload: p })),
      );
    },
    async consume(queue, workers, batch, jobs, onJob) {
      const c = counter(jobs);
      let stop = false;
      const loops = Array.from({ length: workers }, async () => {
        // The documented batch worker: each claim carries the acks of the batch before it (one
        // request per batch); the last batch is acked on its own.
        let done: { id: string; lease: string }[] = [];
        while (!stop) {
          const res = (await post(`/v1/queues/${queue}/claim`, {
            max: batch,
            lease: 60,
            wait: 1,
            ...(done.length > 0 ? { ack: done } : {}),
          })) as {
            jobs: { id: string; lease: string; payload: { t?: number } }[];
            acked?: { ok: boolean }[];
          };
          if (res.acked?.some((a) => !a.ok)) throw new Error('an ack failed');
          if (done.length > 0) c.add(done.length);
          done = [];
          for (const j of res.jobs) onJob(j.payload);
          done = res.jobs.map((j) => ({ id: j.id, lease: j.lease }));
          if (stop && done.length > 0) await post(`/v1/queues/${queue}/ack`, done);
        }
      });
      await c.done;
      stop = true;
      await Promise.all(loops);
    },
    purge: (queue) => sqlAdapter.purge(queue),
    async close() {
      agent.destroy();
      await sqlAdapter.close();
    },
  };
}

async function library(): Promise<Adapter> {
  const log = { warn: () => {}, error: () => {} };
  const { db } = createDatabase({
    url: args.databaseUrl,
    poolSize: args.poolSize,
    statementTimeoutMs: 60_000,
    log,
  });
  return {
    async enqueue(queue, payloads) {
      if (payloads.length === 1) await cfEnqueue(db, queue, payloads[0]);
      else
        await cfEnqueueMany(
          db,
          payloads.map((payload) => ({ queue, payload })),
        );
    },
    async consume(queue, workers, batch, jobs, onJob) {
      // No long-poll outside the server (its wake-ups come from the feed's tailer): an empty claim
      // waits 5 ms and tries again, as a library user's loop would.
      const c = counter(jobs);
      let stop = false;
      const loops = Array.from({ length: workers }, async () => {
        while (!stop) {
          const { jobs: got } = await claimJobs(db, queue, batch, 60);
          if (got.length === 0) {
            await sleep(5);
            continue;
          }
          for (const j of got) onJob(JSON.parse(j.payload) as { t?: number });
          await ackJobs(
            db,
            got.map((j) => ({ queue, id: j.id, lease: j.lease })),
          );
          c.add(got.length);
        }
      });
      await c.done;
      stop = true;
      await Promise.all(loops);
    },
    async purge(queue) {
      await sql`delete from commitfeed.jobs where queue = ${queue}`.execute(db);
    },
    async close() {
      await db.destroy();
    },
  };
}

async function pgBoss(): Promise<Adapter> {
  const boss = new PgBoss({
    connectionString: args.databaseUrl,
    max: args.poolSize,
    schedule: false,
    supervise: false,
  });
  boss.on('error', () => {});
  await boss.start();
  // One createQueue per queue, shared by concurrent senders (concurrent creates deadlock).
  const made = new Map<string, Promise<void>>();
  const ensure = (queue: string): Promise<void> => {
    let p = made.get(queue);
    if (!p) {
      p = boss.createQueue(queue);
      made.set(queue, p);
    }
    return p;
  };
  return {
    async enqueue(queue, payloads) {
      await ensure(queue);
      if (payloads.length === 1) await boss.send(queue, payloads[0]);
      else await boss.insert(payloads.map((data) => ({ name: queue, data })));
    },
    async consume(queue, workers, batch, jobs, onJob) {
      await ensure(queue);
      const c = counter(jobs);
      if (batch > 1) {
        // Throughput: fetch + complete loops, as a pg-boss user draining a backlog writes them
        // (work() waits its polling interval after every batch, found or not: 20 jobs/s per loop).
        let stop = false;
        const loops = Array.from({ length: workers }, async () => {
          while (!stop) {
            const got = await boss.fetch<{ t?: number }>(queue, { batchSize: batch });
            if (got.length === 0) {
              await sleep(5);
              continue;
            }
            for (const j of got) onJob(j.data);
            await boss.complete(
              queue,
              got.map((j) => j.id),
            );
            c.add(got.length);
          }
        });
        await c.done;
        stop = true;
        await Promise.all(loops);
        return;
      }
      // Latency: work() loops, pg-boss's documented worker, polling every 0.5 s (its minimum).
      for (let w = 0; w < workers; w++) {
        await boss.work<{ t?: number }>(queue, { batchSize: 1, pollingIntervalSeconds: 0.5 }, async (got) => {
          for (const j of got) onJob(j.data);
          c.add(got.length);
        });
      }
      await c.done;
      await boss.offWork(queue);
    },
    async purge(queue) {
      // deleteQueue refuses a queue that still holds jobs; the queue's own partition is emptied here.
      await boss.getDb().executeSql('delete from pgboss.job where name = $1', [queue]);
    },
    async close() {
      await boss.stop({ graceful: false, wait: false });
    },
  };
}

async function graphile(): Promise<Adapter> {
  // Quiet: its default logger writes a line per job to stdout.
  const logger = new Logger(() => () => {});
  const utils: WorkerUtils = await makeWorkerUtils({ connectionString: args.databaseUrl, logger });
  await utils.migrate();
  return {
    // The task identifier plays the queue name: each measure has its own.
    async enqueue(queue, payloads) {
      if (payloads.length === 1) await utils.addJob(queue, payloads[0]);
      else await utils.addJobs(payloads.map((payload) => ({ identifier: queue, payload })));
    },
    async consume(queue, workers, _batch, jobs, onJob) {
      const c = counter(jobs);
      // As graphile-worker users write it: one runner with `concurrency` workers (LISTEN/NOTIFY
      // wake-ups, polling as the fallback), a task per job.
      const runner: Runner = await runGraphile({
        connectionString: args.databaseUrl,
        concurrency: workers,
        maxPoolSize: Math.max(args.poolSize, workers + 2),
        noHandleSignals: true,
        pollInterval: 2000,
        logger,
        taskList: {
          [queue]: async (payload) => {
            onJob(payload as { t?: number });
            c.add(1);
          },
        },
      });
      await c.done;
      await runner.stop();
    },
    async purge(queue) {
      await utils.withPgClient((client) =>
        client.query(
          `delete from graphile_worker._private_jobs j using graphile_worker._private_tasks t
           where j.task_id = t.id and t.identifier = $1`,
          [queue],
        ),
      );
    },
    async close() {
      await utils.release();
    },
  };
}

const adapters: Record<System, () => Promise<Adapter>> = {
  'commitfeed-http': http,
  'commitfeed-sql': library,
  'pg-boss': pgBoss,
  'graphile-worker': graphile,
};

let adapter: Adapter | undefined;

async function handle(m: Measure): Promise<MeasureResult> {
  adapter ??= await adapters[args.system]();
  const a = adapter;
  if (m.kind === 'enqueue' || m.kind === 'preload') {
    const seconds = m.kind === 'enqueue' ? m.seconds : Number.POSITIVE_INFINITY;
    const batch = m.kind === 'enqueue' ? m.batch : 1000;
    const senders = m.kind === 'enqueue' ? m.senders : 4;
    const limit = m.kind === 'preload' ? m.jobs : Number.POSITIVE_INFINITY;
    let n = 0;
    const started = performance.now();
    const end = started + seconds * 1000;
    await Promise.all(
      Array.from({ length: senders }, async () => {
        while (performance.now() < end && n < limit) {
          const k = Math.min(batch, limit - n);
          n += k;
          await a.enqueue(
            m.queue,
            Array.from({ length: k }, (_, i) => ({ i: n - k + i })),
          );
        }
      }),
    );
    return { rate: n / ((performance.now() - started) / 1000), done: n };
  }
  if (m.kind === 'purge') {
    await a.purge(m.queue);
    return { rate: Number.NaN, done: 0 };
  }
  if (m.kind === 'process') {
    let timedOut = false;
    const timer = sleep(m.timeoutSec * 1000).then(() => {
      timedOut = true;
    });
    // Measured from the first job handled to the last: each system's start-up (graphile-worker's
    // runner connects, migrates and listens first) is left out, and so is the wind-down (a long-poll
    // claim that started just before the end would otherwise add its whole wait). The jobs of the
    // first delivery (a batch is handed to onJob in one synchronous loop) are not counted either.
    let handled = 0;
    let firstAt = 0;
    let firstBatch = 0;
    let lastAt = 0;
    await Promise.race([
      a.consume(m.queue, m.workers, 10, m.jobs, () => {
        handled++;
        lastAt = performance.now();
        if (handled === 1) {
          firstAt = lastAt;
          queueMicrotask(() => {
            firstBatch = handled;
          });
        }
      }),
      timer,
    ]);
    const sec = ((timedOut ? performance.now() : lastAt) - firstAt) / 1000;
    return {
      rate: (handled - firstBatch) / sec,
      done: handled,
      note: timedOut ? `timed out after ${m.timeoutSec} s` : undefined,
    };
  }
  // latency: workers wait first, then jobs arrive one at a time at `rate`.
  const samples: number[] = [];
  const consuming = a.consume(m.queue, m.workers, 1, m.jobs, (p) => {
    if (typeof p.t === 'number') samples.push(performance.now() - p.t);
  });
  await sleep(1000);
  const gap = 1000 / m.rate;
  const start = performance.now();
  const sends: Promise<void>[] = [];
  for (let i = 0; i < m.jobs; i++) {
    const due = start + i * gap;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    sends.push(a.enqueue(m.queue, [{ i, t: performance.now() }]));
  }
  await Promise.all(sends);
  await Promise.race([consuming, sleep(30_000)]);
  return { rate: Number.NaN, p50: pct(samples, 50), p99: pct(samples, 99), done: samples.length };
}

serveJobs(async (m) => handle(m as Measure));
process.on('exit', () => {
  void adapter?.close();
});
