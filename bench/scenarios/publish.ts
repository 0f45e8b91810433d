// Scenarios 1 and 2: how many events per second each system accepts, one per request and in
// batches, with the load generated from a separate process.
import { benchFile, type Ctx, log } from '../lib/context.ts';
import { Worker } from '../lib/proc.ts';
import { fmtMs, fmtNum, type Series, type Table } from '../lib/report.ts';
import { type CpuMark, coresUsed, cpuMark, pgDelta, pidsByName } from '../lib/sys.ts';
import type { Target } from '../lib/targets.ts';
import type { CeilingArgs, CeilingResult } from '../workers/pg-ceiling.ts';
import type { HttpLoadArgs, HttpLoadResult } from '../workers/http-load.ts';
import type { PublisherArgs, PublisherResult } from '../workers/publisher.ts';
import { warmupCurve } from './warmup-curve.ts';

export interface Point {
  eventsPerSec: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  errors: number;
  firstError?: string;
  cpu: string;
  /** Requests answered 2xx (HTTP points). */
  ok?: number;
  /** CPU seconds over the point: the server's, and the bench database's PostgreSQL backends'. */
  serverSec?: number;
  pgBackendSec?: number;
  /** Seconds between the point's CPU marks. */
  elapsedSec?: number;
  /** Server CPU per request (µs): /proc/<pid>/stat utime+stime over the point ÷ requests answered. */
  cpuUsPerReq: number;
}

export interface System {
  name: string;
  target: Target;
  /** pid whose CPU is the "server" column. */
  serverPid?: number;
}

export function cpuCell(a: CpuMark, b: CpuMark, loaderSec: number): string {
  const c = coresUsed(a, b);
  const sec = (b.at - a.at) / 1000;
  return `${c.server.toFixed(2)} / ${c.postgres.toFixed(2)} / ${(loaderSec / sec).toFixed(2)} / ${c.machine.toFixed(2)}`;
}

export const CPU_NOTE =
  "CPU columns are cores in use during the run: server / postgres (the bench database's backends and the cluster's background processes) / load generator / whole machine (2 cores = 2.00; anything above the sum of the first three is other work on the machine).";

/** Long-lived load processes, one per kind, each running one measurement after another. */
export class Loaders {
  private workers = new Map<string, Worker<unknown>>();

  get(kind: 'http' | 'native' | 'ceiling'): Worker<unknown> {
    let w = this.workers.get(kind);
    if (!w || w.cp.exitCode !== null || w.cp.signalCode !== null) {
      const file = {
        http: 'workers/http-load.ts',
        native: 'workers/publisher.ts',
        ceiling: 'workers/pg-ceiling.ts',
      }[kind];
      w = new Worker<unknown>(kind, benchFile(file), {}, { env: { BENCH_JOBS: '1' } });
      this.workers.set(kind, w);
    }
    return w;
  }

  async close(): Promise<void> {
    await Promise.all([...this.workers.values()].map((w) => w.stop()));
    this.workers.clear();
  }
}

export async function httpPoint(
  ctx: Ctx,
  loaders: Loaders,
  sys: System,
  path: string,
  body: string,
  conns: number,
  sec: number,
  headers?: Record<string, string>,
): Promise<Point> {
  const args: HttpLoadArgs = {
    url: `http://127.0.0.1:${sys.target.port}${path}`,
    body,
    connections: conns,
    durationSec: sec,
    headers,
  };
  const w = loaders.get('http');
  const a = cpuMark(sys.serverPid);
  const r = await w.run<HttpLoadResult>(args, sec * 1000 + 60_000);
  const b = cpuMark(sys.serverPid);
  const errors = r.non2xx + r.errors + r.timeouts;
  const served = r.ok + r.non2xx;
  if (errors > 0)
    ctx.problems.push(`${sys.name}: ${errors} failed requests at ${conns} connections (${path})`);
  return {
    eventsPerSec: r.rps,
    p50: r.latency.p50,
    p90: r.latency.p90,
    p99: r.latency.p99,
    max: r.latency.max,
    errors,
    cpu: cpuCell(a, b, w.cpuSec),
    ok: r.ok,
    serverSec: b.server - a.server,
    pgBackendSec: pgDelta(a, b, true),
    elapsedSec: (b.at - a.at) / 1000,
    cpuUsPerReq: sys.serverPid ? ((b.server - a.server) / Math.max(1, served)) * 1e6 : Number.NaN,
  };
}

async function nativePoint(
  loaders: Loaders,
  sys: System,
  stream: string,
  conns: number,
  sec: number,
): Promise<Point> {
  const args: PublisherArgs = {
    target: sys.target,
    mode: 'closed',
    streams: [stream],
    durationSec: sec,
    concurrency: conns,
  };
  const w = loaders.get('native');
  const a = cpuMark(sys.serverPid);
  const r = await w.run<PublisherResult>(args, sec * 1000 + 60_000);
  const b = cpuMark(sys.serverPid);
  return {
    eventsPerSec: r.total / r.elapsedSec,
    p50: r.latency.p50,
    p90: r.latency.p90,
    p99: r.latency.p99,
    max: r.latency.max,
    errors: r.errors,
    firstError: r.firstError,
    cpu: cpuCell(a, b, w.cpuSec),
    cpuUsPerReq: sys.serverPid ? ((b.server - a.server) / Math.max(1, r.total)) * 1e6 : Number.NaN,
  };
}

function systems(ctx: Ctx): { list: System[]; skipped: string[] } {
  const list: System[] = [];
  const skipped: string[] = [];
  if (ctx.commitfeed)
    list.push({
      name: 'commitfeed',
      target: { kind: 'http', port: ctx.commitfeed.port },
      serverPid: ctx.commitfeed.cp.pid,
    });
  else skipped.push('commitfeed: not running (see above)');
  if (ctx.naive && ctx.opts.peers.includes('naive'))
    list.push({
      name: '(a) naive tx+notify',
      target: { kind: 'http', port: ctx.naive.port },
      serverPid: ctx.naive.cp.pid,
    });
  if (ctx.naive && ctx.opts.peers.includes('naive-nonotify'))
    list.push({
      name: '(b) naive tx, no notify',
      target: { kind: 'http', port: ctx.naive.port, query: '?notify=0' },
      serverPid: ctx.naive.cp.pid,
    });
  if (ctx.naive && ctx.opts.peers.includes('http-ceiling'))
    list.push({
      name: '(e) HTTP ceiling, no database',
      target: { kind: 'http', port: ctx.naive.port, query: '?nodb=1' },
      serverPid: ctx.naive.cp.pid,
    });
  if (ctx.floor && ctx.opts.peers.includes('floor'))
    list.push({
      name: FLOOR_S1,
      target: { kind: 'http', port: ctx.floor.port },
      serverPid: ctx.floor.cp.pid,
    });
  if (ctx.opts.peers.includes('nats')) {
    if (ctx.nats.ok)
      list.push({
        name: '(c) NATS JetStream',
        target: { kind: 'nats' },
        serverPid: pidsByName('nats-server')[0],
      });
    else skipped.push(`(c) NATS JetStream: SKIPPED, ${ctx.nats.reason}`);
  }
  if (ctx.opts.peers.includes('redis')) {
    if (ctx.redis.ok)
      list.push({
        name: '(d) Redis XADD',
        target: { kind: 'redis' },
        serverPid: pidsByName('redis-server')[0],
      });
    else skipped.push(`(d) Redis XADD: SKIPPED, ${ctx.redis.reason}`);
  }
  return { list, skipped };
}

export async function scenario1(ctx: Ctx): Promise<void> {
  const { opts } = ctx;
  await ctx.ensureCommitfeed(1);
  const { list, skipped } = systems(ctx);
  const stream = 's1-publish';
  const body = JSON.stringify({ type: 'bench', data: { n: 1, msg: 'hello, world' } });
  const table: Table = {
    title: 'Scenario 1: single-event publish (closed loop, one event per request)',
    columns: [
      'system',
      'conns',
      'events/s',
      'p50 ms',
      'p90 ms',
      'p99 ms',
      'max ms',
      'errors',
      'CPU srv/pg/load/all',
      'server CPU µs/req',
    ],
    rows: [],
    notes: [
      CPU_NOTE,
      '"server CPU µs/req": the server process\'s CPU time (/proc/<pid>/stat utime + stime) over the point ÷ the requests it answered. (e) and (a)/(b) are one node:http process; (f) is the floor peer of scenario 3 with no subscriber: Fastify, its JSON body parser, a route and a 201 answer.',
      'HTTP systems are driven by autocannon in its own process (latency resolution 1 ms); NATS and Redis by their own client (one NATS connection; Redis over min(conns, 8) connections, commands pipelined), "conns" = publishes in flight.',
      `Each event's data: ${JSON.stringify({ n: 1, msg: 'hello, world' })}; ${opts.durationSec} s per point after a ${opts.warmupSec} s warm-up per system.`,
      ...skipped,
    ],
  };
  const byName = new Map<string, Map<number, Point>>();
  const loaders = new Loaders();
  const cfSys = list.find((x) => x.name === 'commitfeed');
  if (opts.warmupCurveSec > 0 && cfSys)
    await warmupCurve(ctx, loaders, cfSys, `/v1/streams/${stream}/events`, body);
  for (const sys of list) {
    if (sys.name === 'commitfeed' && !(await ctx.ensureCommitfeed(1))) continue;
    const series: Series = { name: sys.name, throughput: [], p99: [] };
    const points = new Map<number, Point>();
    byName.set(sys.name, points);
    const run = (conns: number, sec: number) =>
      sys.target.kind === 'http'
        ? httpPoint(
            ctx,
            loaders,
            sys,
            `/v1/streams/${stream}/events${sys.target.query ?? ''}`,
            body,
            conns,
            sec,
          )
        : nativePoint(loaders, sys, stream, conns, sec);
    try {
      log(`scenario 1: ${sys.name}: warm-up`);
      await run(16, opts.warmupSec);
      for (const conns of opts.conns) {
        log(`scenario 1: ${sys.name}: ${conns} connections, ${opts.durationSec} s`);
        const p = await run(conns, opts.durationSec);
        points.set(conns, p);
        series.throughput.push([conns, p.eventsPerSec]);
        series.p99.push([conns, p.p99]);
        table.rows.push([
          sys.name,
          String(conns),
          fmtNum(p.eventsPerSec),
          fmtMs(p.p50),
          fmtMs(p.p90),
          fmtMs(p.p99),
          fmtMs(p.max),
          String(p.errors),
          p.cpu,
          Number.isFinite(p.cpuUsPerReq) ? p.cpuUsPerReq.toFixed(0) : '–',
        ]);
        log(`  → ${fmtNum(p.eventsPerSec)} events/s, p99 ${fmtMs(p.p99)} ms, ${p.errors} errors`);
        if (p.firstError) table.notes.push(`${sys.name} at ${conns}: first error: ${p.firstError}`);
      }
    } catch (err) {
      table.notes.push(`${sys.name}: FAILED: ${(err as Error).message}`);
      ctx.problems.push(`scenario 1, ${sys.name}: ${(err as Error).message}`);
    }
    ctx.plot.push(series);
  }
  await loaders.close();
  ctx.tables.push(table);

  const cf = byName.get('commitfeed');
  const naive = byName.get('(a) naive tx+notify');
  const at = opts.conns.includes(64) ? 64 : opts.conns[opts.conns.length - 1];
  const mine = cf?.get(at)?.eventsPerSec ?? Number.NaN;
  ctx.checks.push({
    scenario: 1,
    what: `single-event publish at ${at} connections`,
    target: '≥ 10,000 events/s',
    got: `${fmtNum(mine)} events/s`,
    pass: Number.isFinite(mine) ? mine >= 10_000 : undefined,
  });
  const base = naive?.get(at)?.eventsPerSec ?? Number.NaN;
  ctx.checks.push({
    scenario: 1,
    what: `commitfeed ÷ naive tx+notify at ${at} connections`,
    target: '≥ 4×',
    got: `${(mine / base).toFixed(1)}×`,
    pass: Number.isFinite(mine / base) ? mine / base >= 4 : undefined,
  });
  for (const [name, points] of byName) {
    if (name === 'commitfeed') continue;
    const other = points.get(at)?.eventsPerSec;
    if (other && Number.isFinite(mine))
      table.notes.push(`at ${at}: commitfeed = ${(mine / other).toFixed(2)}× ${name}`);
  }
  cpuChecks(ctx, table, byName);
}

const FLOOR_S1 = '(f) bare Fastify handler, no database';

/** Server CPU per publish against the bare handlers' CPU per request, at each connection count. */
function cpuChecks(ctx: Ctx, table: Table, byName: Map<string, Map<number, Point>>): void {
  const cf = byName.get('commitfeed');
  if (!cf) return;
  for (const ref of ['(e) HTTP ceiling, no database', FLOOR_S1]) {
    const points = byName.get(ref);
    if (!points) continue;
    const parts = ctx.opts.conns
      .map((c) => [c, cf.get(c)?.cpuUsPerReq, points.get(c)?.cpuUsPerReq] as const)
      .filter(([, a, b]) => a !== undefined && b !== undefined && Number.isFinite(a / b))
      .map(([c, a, b]) => `${(a! / b!).toFixed(2)}× at ${c}`);
    if (parts.length)
      table.notes.push(`commitfeed's server CPU per publish ÷ ${ref}'s per request: ${parts.join(', ')}`);
  }
  const at = ctx.opts.conns.includes(64) ? 64 : ctx.opts.conns[ctx.opts.conns.length - 1];
  const a = cf.get(at)?.cpuUsPerReq ?? Number.NaN;
  const b = byName.get(FLOOR_S1)?.get(at)?.cpuUsPerReq ?? Number.NaN;
  ctx.checks.push({
    scenario: 1,
    what: `server CPU per single publish ÷ the bare Fastify handler's per request, at ${at} connections`,
    target: '≤ 1.6×',
    got: Number.isFinite(a / b)
      ? `${a.toFixed(0)} / ${b.toFixed(0)} µs = ${(a / b).toFixed(2)}×`
      : 'not measured',
    pass: Number.isFinite(a / b) ? a / b <= 1.6 : undefined,
  });
}

export async function scenario2(ctx: Ctx): Promise<void> {
  const { opts } = ctx;
  const table: Table = {
    title: 'Scenario 2: batched publish (one request or transaction carries a batch of events)',
    columns: [
      'system',
      'batch',
      'conns',
      'events/s',
      'req p50 ms',
      'req p99 ms',
      'errors',
      '% of DB ceiling',
      'CPU srv/pg/load/all',
    ],
    rows: [],
    notes: [
      CPU_NOTE,
      'DB ceiling: a pg client in its own process, each connection looping one statement `WITH ins AS (INSERT ... SELECT FROM unnest($1::json[])) SELECT pg_notify(...)` (one round trip, one notifying commit per batch) into a table with the same columns as commitfeed.feed.',
    ],
  };
  const data = { n: 1, msg: 'hello, world' };
  let best = 0;
  const loaders = new Loaders();
  for (const batch of opts.batchSizes) {
    const ceiling = new Map<number, number>();
    for (const conns of opts.batchConns) {
      log(`scenario 2: DB ceiling, batch ${batch}, ${conns} connections`);
      const args: CeilingArgs = {
        databaseUrl: ctx.dbUrl,
        connections: conns,
        batch,
        durationSec: opts.durationSec,
        data: JSON.stringify(data),
      };
      const w = loaders.get('ceiling');
      const a = cpuMark(undefined);
      try {
        const r = await w.run<CeilingResult>(args, opts.durationSec * 1000 + 60_000);
        const b = cpuMark(undefined);
        ceiling.set(conns, r.eventsPerSec);
        const sec = (b.at - a.at) / 1000;
        const c = coresUsed(a, b);
        const load = w.cpuSec / sec;
        table.rows.push([
          'DB ceiling (pg client)',
          String(batch),
          String(conns),
          fmtNum(r.eventsPerSec),
          fmtMs(r.latency.p50),
          fmtMs(r.latency.p99),
          String(r.errors),
          '100%',
          `– / ~${(c.machine - load).toFixed(2)} / ${load.toFixed(2)} / ${c.machine.toFixed(2)}`,
        ]);
        if (r.firstError) table.notes.push(`DB ceiling error: ${r.firstError}`);
        log(`  → ${fmtNum(r.eventsPerSec)} events/s`);
      } catch (err) {
        table.notes.push(`DB ceiling batch ${batch}: FAILED: ${(err as Error).message}`);
      }
    }
    const ceilingBest = Math.max(...ceiling.values());
    if (!(await ctx.ensureCommitfeed(2))) {
      table.notes.push('commitfeed: not running, skipped');
      continue;
    }
    const sys: System = {
      name: 'commitfeed',
      target: { kind: 'http', port: ctx.commitfeed!.port },
      serverPid: ctx.commitfeed!.cp.pid,
    };
    const body = JSON.stringify(Array.from({ length: batch }, () => ({ type: 'bench', data })));
    for (const conns of opts.batchConns) {
      log(`scenario 2: commitfeed, batch ${batch}, ${conns} connections`);
      try {
        const p = await httpPoint(
          ctx,
          loaders,
          sys,
          '/v1/streams/s2-batch/events',
          body,
          conns,
          opts.durationSec,
        );
        const events = p.eventsPerSec * batch;
        best = Math.max(best, events);
        const ref = ceiling.get(conns) ?? ceilingBest;
        table.rows.push([
          'commitfeed (HTTP)',
          String(batch),
          String(conns),
          fmtNum(events),
          fmtMs(p.p50),
          fmtMs(p.p99),
          String(p.errors),
          `${((events / ref) * 100).toFixed(0)}%`,
          p.cpu,
        ]);
        log(`  → ${fmtNum(events)} events/s`);
      } catch (err) {
        table.notes.push(`commitfeed batch ${batch}: FAILED: ${(err as Error).message}`);
        ctx.problems.push(`scenario 2, batch ${batch}: ${(err as Error).message}`);
      }
    }
  }
  await loaders.close();
  ctx.tables.push(table);
  ctx.checks.push({
    scenario: 2,
    what: 'batched publish, best of the runs above',
    target: '≥ 100,000 events/s',
    got: `${fmtNum(best)} events/s`,
    pass: best > 0 ? best >= 100_000 : undefined,
  });
}
