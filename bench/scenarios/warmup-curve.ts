// Scenario 1's warm-up curve (`--warmup-curve S`): the first load a fresh commitfeed on a fresh
// database sees, events/s per second, against its steady state.
import type { Ctx } from '../lib/context.ts';
import { log } from '../lib/context.ts';
import { fmtNum, type Table } from '../lib/report.ts';
import { cpuMark } from '../lib/sys.ts';
import type { HttpLoadArgs, HttpLoadResult } from '../workers/http-load.ts';
import { cpuCell, type Loaders, type System } from './publish.ts';

/**
 * The warm-up curve: the first load a fresh instance on a fresh database sees, 64 connections, counted
 * per second. "Steady" is the mean of the last 10 s; the target is the first 10 s within 15% of it.
 */
export async function warmupCurve(
  ctx: Ctx,
  loaders: Loaders,
  sys: System,
  path: string,
  body: string,
): Promise<void> {
  const sec = Math.max(20, Math.floor(ctx.opts.warmupCurveSec));
  const w = loaders.get('http');
  // The load generator is a Node process too: warm it first on the database-free peer, so the
  // curve shows the server's warm-up, not autocannon's.
  if (ctx.naive) {
    log('scenario 1: warming the load generator on the HTTP ceiling peer, 3 s');
    const warm: HttpLoadArgs = {
      url: `http://127.0.0.1:${ctx.naive.port}${path}?nodb=1`,
      body,
      connections: 64,
      durationSec: 3,
    };
    await w.run<HttpLoadResult>(warm, 60_000);
  }
  log(`scenario 1: ${sys.name}: warm-up curve, 64 connections, ${sec} s on the fresh instance`);
  const a = cpuMark(sys.serverPid);
  const args: HttpLoadArgs = {
    url: `http://127.0.0.1:${sys.target.port}${path}`,
    body,
    connections: 64,
    durationSec: sec,
    perSecond: true,
    cpuPid: sys.serverPid,
  };
  const r = await w.run<HttpLoadResult>(args, sec * 1000 + 60_000);
  const b = cpuMark(sys.serverPid);
  const per = r.perSecond ?? [];
  const sum = (xs: number[]) => xs.reduce((x, y) => x + y, 0);
  const mean = (xs: number[]) => sum(xs) / Math.max(1, xs.length);
  const first = mean(per.slice(0, 10));
  const steady = mean(per.slice(-10));
  const ratio = first / steady;
  const table: Table = {
    title: `Scenario 1, warm-up: a fresh instance on a fresh database, 64 connections, ${sec} s, events/s per second`,
    columns: [
      'seconds',
      'events/s each second',
      'mean events/s',
      '÷ steady (last 10 s)',
      'server CPU µs per publish',
      'machine busy cores',
    ],
    rows: [],
    notes: [
      `CPU srv/pg/load/all over the whole curve: ${cpuCell(a, b, w.cpuSec)}. ${r.non2xx + r.errors + r.timeouts} failed requests.`,
      'The load generator ran 3 s against the HTTP ceiling peer first (its own JIT warm-up is not in the curve).',
    ],
  };
  for (let i = 0; i < per.length; i += 5) {
    const part = per.slice(i, i + 5);
    const cpu = sum(r.cpuPerSecond?.slice(i, i + 5) ?? []);
    const busy = mean(r.machinePerSecond?.slice(i, i + 5) ?? []);
    table.rows.push([
      `${i}–${i + part.length}`,
      part.map((x) => fmtNum(x)).join(' '),
      fmtNum(mean(part)),
      `${((mean(part) / steady) * 100).toFixed(0)}%`,
      r.cpuPerSecond ? ((cpu / Math.max(1, sum(part))) * 1e6).toFixed(0) : '–',
      busy.toFixed(2),
    ]);
  }
  ctx.tables.push(table);
  log(`  → first 10 s ${fmtNum(first)} events/s, last 10 s ${fmtNum(steady)} (${(ratio * 100).toFixed(0)}%)`);
  ctx.checks.push({
    scenario: 1,
    what: 'warm-up: first 10 s on a fresh database ÷ steady state (last 10 s)',
    target: 'within 15%',
    got: `${(ratio * 100).toFixed(0)}% (${fmtNum(first)} / ${fmtNum(steady)} events/s)`,
    pass: Number.isFinite(ratio) ? Math.abs(ratio - 1) <= 0.15 : undefined,
  });
}
