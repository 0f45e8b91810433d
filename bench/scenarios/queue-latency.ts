// Queue wake-up latency: enqueue → claim with 1, 8 and 32 claimers long-polling one queue.
//
// Runs on its own (not part of `npm run bench`):
//   npx tsx bench/scenarios/queue-latency.ts [--workers 1,8,32] [--jobs 300] [--gap-ms 20]
//       [--db postgres://postgres@127.0.0.1:5432/postgres] [--server-dir .] [--port N]
// It creates a scratch database, starts commitfeed from --server-dir (`node --import tsx src/main.ts`,
// its own process group, stopped however this ends), and for each worker count keeps that many
// claims (`max` 1, `wait` 30) waiting on one queue while it enqueues one job at a time, `gap-ms`
// apart (so every enqueue finds every claimer asleep). Latency is from just before the enqueue
// request is sent to the moment the claim response carrying that job has been read, on one
// monotonic clock (the same process). Every job must be claimed exactly once, or the run fails.
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { spawnNode, stop, waitForHttp } from '../lib/proc.ts';
import { summarize } from '../lib/stats.ts';

const { values: v } = parseArgs({
  options: {
    workers: { type: 'string', default: '1,8,32' },
    jobs: { type: 'string', default: '300' },
    'gap-ms': { type: 'string', default: '20' },
    db: { type: 'string', default: 'postgres://postgres@127.0.0.1:5432/postgres' },
    'server-dir': { type: 'string', default: '.' },
    port: { type: 'string', default: String(38000 + (process.pid % 1000)) },
  },
});
const workerCounts = v.workers.split(',').map(Number);
const jobs = Number(v.jobs);
const gapMs = Number(v['gap-ms']);
const port = Number(v.port);
const base = `http://127.0.0.1:${port}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// biome-ignore lint/suspicious/noExplicitAny: response bodies are read field by field
async function json(path: string, body: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(base + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

/** Committed transactions of the bench database so far (the server's statements run one each). */
async function commits(admin: pg.Client, db: string): Promise<number> {
  // Backends report their counts within about a second.
  await sleep(1500);
  const { rows } = await admin.query(
    'select xact_commit::int8::text as n from pg_stat_database where datname = $1',
    [db],
  );
  return Number(rows[0].n);
}

async function measure(admin: pg.Client, db: string, queue: string, workers: number): Promise<string> {
  const sent = new Map<string, number>();
  const got = new Map<string, number>();
  const answered: number[] = [];
  let stopping = false;
  const loops = Array.from({ length: workers }, async () => {
    while (!stopping) {
      const r = await json(`/v1/queues/${queue}/claim`, { max: 1, lease: 30, wait: 30 });
      const now = performance.now();
      for (const j of r.body?.jobs ?? []) {
        const seq = String(j.payload.seq);
        if (got.has(seq)) throw new Error(`job ${seq} claimed twice`);
        got.set(seq, now);
        await json(`/v1/queues/${queue}/jobs/${j.id}/ack`, { lease: j.lease });
      }
    }
  });
  // Let every claim reach its wait.
  await sleep(500);
  const before = await commits(admin, db);
  for (let seq = 0; seq < jobs; seq++) {
    const t = performance.now();
    sent.set(String(seq), t);
    const r = await json(`/v1/queues/${queue}/jobs`, { payload: { seq } });
    answered.push(performance.now() - t);
    if (r.status !== 201) throw new Error(`enqueue: HTTP ${r.status} ${JSON.stringify(r.body)}`);
    const deadline = Date.now() + 5000;
    while (!got.has(String(seq))) {
      if (Date.now() > deadline) throw new Error(`job ${seq} not claimed within 5 s`);
      await sleep(1);
    }
    await sleep(gapMs);
  }
  const perJob = ((await commits(admin, db)) - before) / jobs;
  stopping = true;
  // Release the waiting claims: one job per worker, not measured.
  for (let i = 0; i < workers; i++) await json(`/v1/queues/${queue}/jobs`, { payload: { seq: `end-${i}` } });
  await Promise.all(loops);
  const lat = [...sent].map(([seq, t]) => got.get(seq)! - t);
  const s = summarize(lat);
  return `| ${workers} | ${jobs} | ${s.p50.toFixed(2)} | ${s.p99.toFixed(2)} | ${summarize(answered).p50.toFixed(2)} | ${perJob.toFixed(1)} |`;
}

async function main(): Promise<void> {
  const dbName = `commitfeed_qlat_${process.pid}`;
  const admin = new pg.Client({ connectionString: v.db });
  await admin.connect();
  await admin.query(`create database ${dbName}`);
  const url = new URL(v.db);
  url.pathname = `/${dbName}`;
  const server = spawnNode('src/main.ts', [], {
    cwd: resolve(v['server-dir']),
    env: { PORT: String(port), HOST: '127.0.0.1', DATABASE_URL: url.toString(), LOG_LEVEL: 'warn' },
  });
  try {
    await waitForHttp(`${base}/readyz`, server, 60_000);
    const rows = [
      '| waiting workers | jobs | p50 ms | p99 ms | enqueue answered p50 ms | database transactions per job |',
      '|---:|---:|---:|---:|---:|---:|',
    ];
    for (const n of workerCounts) {
      rows.push(await measure(admin, dbName, `lat-${n}`, n));
      console.log(rows.at(-1));
    }
    console.log(`\n${rows.join('\n')}`);
  } finally {
    await stop(server);
    await admin.query(`drop database if exists ${dbName} with (force)`);
    await admin.end();
  }
}

await main();
