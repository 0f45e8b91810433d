// Scenario 7: the Mercure hub beside the native API, on the same commitfeed process in the same
// run. Publish: form POSTs to /.well-known/mercure against JSON POSTs to the native publish route
// (autocannon, closed loop, alternating point by point so machine load drifts onto both alike).
// Fan-out: M subscribers each matching one exact topic on the hub, against M native SSE subscribers
// of one stream each, with the same open-loop publisher rate; latency is publish → parsed frame.
import { SignJWT } from 'jose';
import { type Ctx, log } from '../lib/context.ts';
import { fmtMs, fmtNum, type Table } from '../lib/report.ts';
import { type CpuMark, coresUsed, cpuMark, pgDelta } from '../lib/sys.ts';
import { httpPath, MERCURE_PATH, mercureForm, type Target } from '../lib/targets.ts';
import { runDelivery, waitForTailer } from '../lib/delivery-run.ts';
import { CPU_NOTE, httpPoint, Loaders, type System } from './publish.ts';

/** The hub settings run.ts starts commitfeed with, so both APIs are measured on one process. */
export const BENCH_MERCURE_SECRET = 'bench-mercure-secret-0123456789-0123456789';
const ISSUER = 'https://bench.example';
const RESOURCE = 'http://127.0.0.1/.well-known/mercure';
export const BENCH_MERCURE_ENV: Record<string, string> = {
  MERCURE_ISSUERS: JSON.stringify([{ iss: ISSUER, secret: BENCH_MERCURE_SECRET }]),
  MERCURE_RESOURCE: RESOURCE,
  MERCURE_ANONYMOUS: 'true',
};

/** An RFC 9068 access token granting publish on every topic (docs/mercure-auth.md). */
async function publishToken(): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({
    iss: ISSUER,
    aud: RESOURCE,
    sub: 'urn:uuid:00000000-0000-4000-8000-00000000be7c',
    client_id: ISSUER,
    iat: now,
    exp: now + 24 * 3600,
    jti: `urn:uuid:${crypto.randomUUID()}`,
    authorization_details: [
      { type: 'https://mercure.rocks/authorization-detail', actions: ['publish'], topics: [{ match: '*' }] },
    ],
  })
    .setProtectedHeader({ alg: 'HS256', typ: 'at+jwt' })
    .sign(new TextEncoder().encode(BENCH_MERCURE_SECRET));
}

/** Cores the bench database's PostgreSQL backends use while nothing is sent (5 s). */
async function idlePostgres(pid: number | undefined): Promise<number> {
  const a = cpuMark(pid);
  await new Promise((r) => setTimeout(r, 5000));
  const b = cpuMark(pid);
  return pgDelta(a, b, true) / ((b.at - a.at) / 1000);
}

/** The group commit's counters (/metrics): events written and statements committed so far. */
async function writeCounters(port: number): Promise<{ events: number; commits: number }> {
  try {
    const text = await (
      await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(5000) })
    ).text();
    const get = (name: string) => Number(new RegExp(`^${name} (\\S+)`, 'm').exec(text)?.[1] ?? Number.NaN);
    return { events: get('commitfeed_events_written_total'), commits: get('commitfeed_commits_total') };
  } catch {
    return { events: Number.NaN, commits: Number.NaN };
  }
}

export async function scenario7(ctx: Ctx): Promise<void> {
  const { opts } = ctx;
  const publishTable: Table = {
    title: 'Scenario 7a: Mercure publish beside native publish (closed loop, one update per request)',
    columns: [
      'API',
      'conns',
      'updates/s',
      'p50 ms',
      'p90 ms',
      'p99 ms',
      'errors',
      'CPU srv/pg/load/all',
      'srv µs/update',
      'pg µs/update',
      'pg net µs/update',
      'events/commit',
    ],
    rows: [],
    notes: [
      CPU_NOTE,
      "srv µs/update: the commitfeed process's CPU time per update answered; pg µs/update: CPU time of the bench database's PostgreSQL backends (the pool, the tail read, the listener; from /proc/<pid>/stat, background processes left out: they also serve other databases) per update answered. CPU time, not wall time: the measure to compare on a loaded machine.",
      'One commitfeed process serves both. Native: `POST /v1/streams/s7-native/events` with a JSON body; Mercure: ' +
        '`POST /.well-known/mercure`, form-encoded `topic` + `data`, a bearer token with a publish grant (verified on every request). ' +
        `Both driven by autocannon in its own process; the two APIs alternate at each connection count; ${opts.durationSec} s per point after a ${opts.warmupSec} s warm-up each.`,
    ],
  };
  const fanTable: Table = {
    title: `Scenario 7b: Mercure fan-out beside native fan-out, ${fmtNum(opts.mercureSubs)} SSE subscribers, ${opts.mercureRate} updates/s over ${opts.fanoutStreams} topics/streams`,
    columns: [
      'API',
      'subscribers',
      'published/s',
      'delivered/s',
      'p50 ms',
      'p90 ms',
      'p99 ms',
      'delivered / expected',
      'missing',
      'dup',
      'CPU srv/pg/subs/all',
    ],
    rows: [],
    notes: [
      `Each subscriber follows one of ${opts.fanoutStreams} streams (native: \`GET /v1/streams/{s}/events\`) or one exact topic (Mercure: \`GET /.well-known/mercure?match=https://bench.example/{s}\`, anonymous), ` +
        `so every update goes to ${fmtNum(opts.mercureSubs / opts.fanoutStreams)} connections. Open-loop publisher in its own process (native JSON / Mercure form publishes, ${opts.fanoutDurationSec} s); ` +
        'latency from just before the publish is sent to the frame being parsed; delivered/s = deliveries ÷ (publish time + drain). CPU from all-connected to the end of the drain.',
    ],
  };
  ctx.tables.push(publishTable, fanTable);
  if (!(await ctx.ensureCommitfeed(7))) {
    publishTable.notes.push('commitfeed not running: skipped');
    return;
  }
  const token = await publishToken();
  const server = ctx.commitfeed!;
  const pid = server.cp.pid;
  const sys: System = { name: 'commitfeed', target: { kind: 'http', port: server.port }, serverPid: pid };
  const data = JSON.stringify({ n: 1, msg: 'hello, world' });
  const apis: { name: string; path: string; body: string; headers: Record<string, string> }[] = [
    {
      name: 'native (JSON)',
      path: httpPath('s7-native'),
      body: JSON.stringify({ type: 'bench', data: { n: 1, msg: 'hello, world' } }),
      headers: { 'content-type': 'application/json' },
    },
    {
      name: 'Mercure (form)',
      path: MERCURE_PATH,
      body: mercureForm('s7-mercure', data),
      headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: `Bearer ${token}` },
    },
  ];

  // ---- publish rate
  const rates = new Map<string, Map<number, number>>(apis.map((a) => [a.name, new Map()]));
  const pgPer = new Map<string, Map<number, number>>(apis.map((a) => [a.name, new Map()]));
  const pgNet = new Map<string, Map<number, number>>(apis.map((a) => [a.name, new Map()]));
  const loaders = new Loaders();
  try {
    for (const api of apis) {
      log(`scenario 7: ${api.name} publish warm-up`);
      await httpPoint(ctx, loaders, sys, api.path, api.body, 16, opts.warmupSec, api.headers);
    }
    const idleCores = await idlePostgres(pid);
    publishTable.notes.push(
      `PostgreSQL backends while the server is idle: ${(idleCores * 1000).toFixed(1)} ms of CPU per second.`,
    );
    for (const conns of opts.conns) {
      for (const api of apis) {
        log(`scenario 7: ${api.name} publish, ${conns} connections, ${opts.durationSec} s`);
        const w0 = await writeCounters(server.port);
        const p = await httpPoint(
          ctx,
          loaders,
          sys,
          api.path,
          api.body,
          conns,
          opts.durationSec,
          api.headers,
        );
        const w1 = await writeCounters(server.port);
        const commits = w1.commits - w0.commits;
        const group = commits > 0 ? ((w1.events - w0.events) / commits).toFixed(1) : 'n/a';
        rates.get(api.name)!.set(conns, p.eventsPerSec);
        const per = (sec: number | undefined) => (p.ok ? ((sec ?? Number.NaN) / p.ok) * 1e6 : Number.NaN);
        pgPer.get(api.name)!.set(conns, per(p.pgBackendSec));
        const net = per((p.pgBackendSec ?? Number.NaN) - idleCores * (p.elapsedSec ?? Number.NaN));
        pgNet.get(api.name)!.set(conns, net);
        publishTable.rows.push([
          api.name,
          String(conns),
          fmtNum(p.eventsPerSec),
          fmtMs(p.p50),
          fmtMs(p.p90),
          fmtMs(p.p99),
          String(p.errors),
          p.cpu,
          per(p.serverSec).toFixed(0),
          per(p.pgBackendSec).toFixed(0),
          net.toFixed(0),
          group,
        ]);
        log(
          `  → ${fmtNum(p.eventsPerSec)} updates/s, p99 ${fmtMs(p.p99)} ms, ${p.errors} errors, pg ${per(p.pgBackendSec).toFixed(0)} µs/update`,
        );
      }
    }
  } catch (err) {
    publishTable.notes.push(`FAILED: ${(err as Error).message}`);
    ctx.problems.push(`scenario 7 (publish): ${(err as Error).message}`);
  } finally {
    await loaders.close();
  }
  for (const conns of opts.conns) {
    const n = rates.get(apis[0].name)!.get(conns);
    const m = rates.get(apis[1].name)!.get(conns);
    const pn = pgPer.get(apis[0].name)!.get(conns);
    const pm = pgPer.get(apis[1].name)!.get(conns);
    const qn = pgNet.get(apis[0].name)!.get(conns);
    const qm = pgNet.get(apis[1].name)!.get(conns);
    const pg =
      pn && pm
        ? `; PostgreSQL CPU per update: Mercure = ${(pm / pn).toFixed(2)}× native (net of idle: ${qn && qm ? (qm / qn).toFixed(2) : 'n/a'}×)`
        : '';
    if (n && m)
      publishTable.notes.push(`at ${conns}: updates/s: Mercure = ${(m / n).toFixed(2)}× native${pg}`);
  }

  // ---- fan-out
  const streams = Array.from({ length: opts.fanoutStreams }, (_, i) => `s7-fan-${i}`);
  const subStreams = Array.from({ length: opts.mercureSubs }, (_, i) => streams[i % streams.length]);
  const runs: { name: string; mercure: boolean; target: Target }[] = [
    { name: 'native SSE', mercure: false, target: { kind: 'http', port: server.port } },
    { name: 'Mercure hub', mercure: true, target: { kind: 'mercure', port: server.port, token } },
  ];
  const delivered = new Map<string, number>();
  for (const run of runs) {
    if (!(await ctx.ensureCommitfeed(7))) break;
    log(`scenario 7: ${run.name} fan-out, ${fmtNum(opts.mercureSubs)} subscribers`);
    const lag = await waitForTailer(ctx.commitfeed!.port);
    if (lag) fanTable.notes.push(lag);
    let cpuA: CpuMark | undefined;
    try {
      const { sub, pub, subCpuSec } = await runDelivery({
        label: `${run.name} fan-out`,
        notes: fanTable.notes,
        sub: { kind: 'sse', port: server.port, mercure: run.mercure, streams: subStreams, connectBatch: 256 },
        pub: {
          target: run.target,
          mode: 'rate',
          streams,
          rate: opts.mercureRate,
          durationSec: opts.fanoutDurationSec,
        },
        drainMs: 15_000,
        connectTimeoutMs: 300_000,
        onReady: () => {
          cpuA = cpuMark(pid);
        },
      });
      const b = cpuMark(pid);
      const c = cpuA ? coresUsed(cpuA, b) : undefined;
      const sec = cpuA ? (b.at - cpuA.at) / 1000 : Number.NaN;
      const perSec = sub.received / (pub.elapsedSec + sub.drainSec);
      delivered.set(run.name, perSec);
      fanTable.rows.push([
        run.name,
        fmtNum(sub.subscribers - sub.connectFailed),
        fmtNum(pub.total / pub.elapsedSec),
        fmtNum(perSec),
        fmtMs(sub.latency.p50),
        fmtMs(sub.latency.p90),
        fmtMs(sub.latency.p99),
        `${fmtNum(sub.received)} / ${fmtNum(sub.expected)}`,
        String(sub.missing),
        String(sub.duplicates),
        c
          ? `${c.server.toFixed(2)} / ${c.postgres.toFixed(2)} / ${(subCpuSec / sec).toFixed(2)} / ${c.machine.toFixed(2)}`
          : 'n/a',
      ]);
      const bad: string[] = [];
      if (sub.missing > 0) bad.push(`${sub.missing} deliveries missing`);
      if (sub.duplicates > 0) bad.push(`${sub.duplicates} duplicates, first: ${sub.firstDuplicate}`);
      if (sub.orderMismatches > 0)
        bad.push(`subscribers of ${sub.orderMismatches} streams saw different orders`);
      if (sub.connectFailed > 0) bad.push(`${sub.connectFailed} failed to connect: ${sub.firstConnectError}`);
      if (pub.errors > 0) bad.push(`${pub.errors} publishes failed: ${pub.firstError}`);
      for (const m of bad) {
        fanTable.notes.push(`${run.name}: ${m}`);
        ctx.problems.push(`scenario 7, ${run.name}: ${m}`);
      }
      log(
        `  → ${fmtNum(perSec)} deliveries/s, p50 ${fmtMs(sub.latency.p50)} ms, p99 ${fmtMs(sub.latency.p99)} ms, missing ${sub.missing}`,
      );
    } catch (err) {
      fanTable.notes.push(`${run.name}: FAILED: ${(err as Error).message}`);
      ctx.problems.push(`scenario 7 (${run.name} fan-out): ${(err as Error).message}`);
    }
  }
  const n = delivered.get('native SSE');
  const m = delivered.get('Mercure hub');
  if (n && m) fanTable.notes.push(`delivered/s: Mercure = ${(m / n).toFixed(2)}× native`);
}
