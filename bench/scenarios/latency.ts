// Scenario 3: publish → subscriber latency at a steady rate, commitfeed beside the no-database HTTP +
// SSE floor (bench/peers/floor-server.ts) and the other peers, all driven by the same publisher and
// subscriber processes. With `--latency-rounds N` the systems alternate N times (commitfeed, floor,
// commitfeed, floor, ...) and each system's best p50 and best p99 are compared: on a shared machine
// the load moves between runs, and the best of alternated runs is the fairest pairing it gives.
// Run after scenario 2 (`--scenarios 3,2,3`), the second table is the latency right after the batch burst.
import { readFileSync } from 'node:fs';
import type { Ctx } from '../lib/context.ts';
import { log } from '../lib/context.ts';
import { deliveryCells, problemsOf, runDelivery, waitForTailer } from '../lib/delivery-run.ts';
import { FLOOR_COMMIT_NAME, FLOOR_NAME } from '../lib/peers.ts';
import { fmtMs, fmtNum, type Table } from '../lib/report.ts';
import { treeCpuSeconds as cpuSeconds } from '../lib/sys.ts';
import type { Target } from '../lib/targets.ts';
import type { SubscriberArgs, SubscriberResult } from '../workers/subscriber.ts';

/** Scenario 3's untimed warm-up per system, in seconds. */
const WARMUP_SEC = 2;

const CF_NAME = 'commitfeed (SSE)';

interface System {
  name: string;
  sub: Omit<SubscriberArgs, 'label'>;
  target: Target;
  pid?: number;
}

interface Round {
  sub: SubscriberResult;
  /** The 1-minute load average right after the run (/proc/loadavg). */
  load: string;
  /** The publisher kept its rate (at least 95% of it): the run measured the system, not a saturated machine. */
  kept: boolean;
}

/** The 1-minute load average (/proc/loadavg's first field). */
export function loadAvg(): string {
  try {
    return readFileSync('/proc/loadavg', 'utf8').split(' ')[0];
  } catch {
    return '?';
  }
}

function systemsOf(ctx: Ctx, subStreams: string[], table: Table): System[] {
  const { opts } = ctx;
  const list: System[] = [];
  // An HTTP server publishing by POST and serving SSE: commitfeed, the no-database floor, the naive peer.
  const sse = (name: string, server: { port: number; cp: { pid?: number } }): System => ({
    name,
    sub: { kind: 'sse', port: server.port, streams: subStreams },
    target: { kind: 'http', port: server.port },
    pid: server.cp.pid,
  });
  if (ctx.commitfeed) list.push(sse(CF_NAME, ctx.commitfeed));
  if (ctx.floor && opts.peers.includes('floor')) list.push(sse(FLOOR_NAME, ctx.floor));
  if (ctx.floorCommit) list.push(sse(FLOOR_COMMIT_NAME, ctx.floorCommit));
  if (ctx.naive && opts.peers.includes('naive'))
    list.push(sse('naive tx+notify, 50 ms polling SSE', ctx.naive));
  if (opts.peers.includes('nats')) {
    if (ctx.nats.ok)
      list.push({
        name: 'NATS JetStream push consumers',
        sub: { kind: 'nats', streams: subStreams },
        target: { kind: 'nats' },
      });
    else table.notes.push(`NATS: SKIPPED, ${ctx.nats.reason}`);
  }
  if (opts.peers.includes('redis')) {
    if (ctx.redis.ok)
      list.push({
        name: 'Redis XADD + XREAD BLOCK',
        sub: { kind: 'redis', streams: subStreams },
        target: { kind: 'redis' },
      });
    else table.notes.push(`Redis: SKIPPED, ${ctx.redis.reason}`);
  }
  return list;
}

export async function scenario3(ctx: Ctx): Promise<void> {
  const { opts } = ctx;
  const afterBurst = ctx.tables.some((t) => t.title.startsWith('Scenario 2'));
  const streams = Array.from({ length: opts.latencyStreams }, (_, i) => `s3-lat-${i}`);
  const subStreams = Array.from({ length: opts.latencySubs }, (_, i) => streams[i % streams.length]);
  const rounds = Math.max(1, Math.floor(opts.latencyRounds));
  const table: Table = {
    title: `Scenario 3: publish → subscriber latency, ${fmtNum(opts.latencyRate)} events/s over ${opts.latencyStreams} streams, ${opts.latencySubs} subscribers${afterBurst ? ', right after scenario 2’s batch burst' : ''}`,
    columns: [
      'system',
      'round',
      'published/s',
      'p50 ms',
      'p90 ms',
      'p99 ms',
      'max ms',
      'delivered / expected',
      'missing',
      'dup',
      'publish p50 / p99 ms',
      'client loop p99 ms',
      'server CPU cores',
      'load avg 1 min',
    ],
    rows: [],
    notes: [
      'Open-loop publisher (single-event publishes, up to 64 in flight) and subscribers in two separate processes; each subscriber reads one stream, so every event goes to ' +
        `${opts.latencySubs / opts.latencyStreams} subscribers. Latency runs from just before the publish request is sent to the frame being parsed by the subscriber.`,
      `${opts.latencyDurationSec} s per run, after ${WARMUP_SEC} s of the same load on other streams (not measured) before each system's first round; ${rounds} round(s) per system, systems alternating. "client loop p99" is the subscriber process's own event-loop delay: the part of the latency that is the measuring client's. "load avg" is /proc/loadavg's 1-minute figure right after the run (the bench's own processes included).`,
    ],
  };
  if (ctx.floor && opts.peers.includes('floor'))
    table.notes.push(
      "The floor (bench/peers/floor-server.ts) is a Fastify server whose POST writes the event's frame to that stream's open SSE responses and answers 201: no database, no history, no resume, no backpressure. It is driven by the same publisher and subscriber processes as commitfeed.",
    );
  if (ctx.floorCommit)
    table.notes.push(
      'The durable floor (the same server with FLOOR_DATABASE_URL) writes each event first, one autocommit insert into an unindexed table per request from a bare pg pool, and fans out when it returns: the WAL flush a publish must wait for, nothing else (no grouping, notify, order or read).',
    );
  if (!(await ctx.ensureCommitfeed(3))) table.notes.push('commitfeed: not running, skipped');
  const systems = systemsOf(ctx, subStreams, table);
  const results = new Map<string, Round[]>();
  for (let round = 1; round <= rounds; round++) {
    for (const sys of systems) {
      const label = rounds > 1 ? `${sys.name}, round ${round}` : sys.name;
      log(`scenario 3: ${label}`);
      try {
        const r = await measure(ctx, sys, streams, round === 1, table);
        if (!r) continue;
        const list = results.get(sys.name) ?? [];
        list.push(r);
        results.set(sys.name, list);
      } catch (err) {
        table.notes.push(`${label}: FAILED: ${(err as Error).message}`);
        if (sys.name === CF_NAME) ctx.problems.push(`scenario 3: ${(err as Error).message}`);
      }
    }
  }
  ctx.tables.push(table);
  compare(ctx, table, results, afterBurst);
}

/** One timed run of `sys` (after a warm-up on other streams when `warm`); its row goes into `table`. */
async function measure(
  ctx: Ctx,
  sys: System,
  streams: string[],
  warm: boolean,
  table: Table,
): Promise<Round | undefined> {
  const { opts } = ctx;
  if (sys.name === CF_NAME) {
    if (!(await ctx.ensureCommitfeed(3))) return undefined;
    const lag = await waitForTailer(ctx.commitfeed!.port);
    if (lag) table.notes.push(lag);
  }
  // A short untimed run first, on streams of its own: a process that has not yet served this path
  // (scenario 3 first in a run) spends its first second compiling it, and one stall of ~100 ms is
  // the whole p99 of 10,000 publishes. Scenario 1's warm-up curve measures that.
  if (warm)
    await runDelivery({
      label: `${sys.name} warm-up`,
      sub: { ...sys.sub, streams: sys.sub.streams.map((s) => `${s}-warm`) },
      pub: {
        target: sys.target,
        mode: 'rate',
        streams: streams.map((s) => `${s}-warm`),
        rate: opts.latencyRate,
        durationSec: WARMUP_SEC,
      },
      drainMs: 2000,
    });
  const cpu0 = sys.pid ? cpuSeconds(sys.pid) : Number.NaN;
  const t0 = performance.now();
  const { sub, pub } = await runDelivery({
    label: sys.name,
    notes: table.notes,
    sub: sys.sub,
    pub: {
      target: sys.target,
      mode: 'rate',
      streams,
      rate: opts.latencyRate,
      durationSec: opts.latencyDurationSec,
    },
    drainMs: 5000,
  });
  const load = loadAvg();
  const round = table.rows.filter((r) => r[0] === sys.name).length + 1;
  table.rows.push([
    sys.name,
    String(round),
    fmtNum(pub.total / pub.elapsedSec),
    ...deliveryCells(sub),
    `${fmtMs(pub.latency.p50)} / ${fmtMs(pub.latency.p99)}`,
    fmtMs(sub.loopDelayP99Ms),
    // Over the whole run (connect, publishing, drain): a comparison between runs, not a rate.
    sys.pid ? ((cpuSeconds(sys.pid) - cpu0) / ((performance.now() - t0) / 1000)).toFixed(2) : '–',
    load,
  ]);
  table.notes.push(...problemsOf(ctx, 3, sys.name, sub, pub));
  if (pub.throttled > 0)
    table.notes.push(`${sys.name}: publisher fell behind its rate ${pub.throttled} times (256 in flight)`);
  log(
    `  → p50 ${fmtMs(sub.latency.p50)} ms, p99 ${fmtMs(sub.latency.p99)} ms, missing ${sub.missing}, load ${load}`,
  );
  return { sub, load, kept: pub.total / pub.elapsedSec >= 0.95 * opts.latencyRate };
}

/** Each system's best p50 and best p99 over its rounds, with the load of the round it came from. */
function best(rounds: Round[]): { p50: number; p50Load: string; p99: number; p99Load: string } {
  const byP50 = rounds.reduce((a, b) => (b.sub.latency.p50 < a.sub.latency.p50 ? b : a));
  const byP99 = rounds.reduce((a, b) => (b.sub.latency.p99 < a.sub.latency.p99 ? b : a));
  return { p50: byP50.sub.latency.p50, p50Load: byP50.load, p99: byP99.sub.latency.p99, p99Load: byP99.load };
}

/** The notes and target checks: commitfeed against the floor (or the absolute targets without one). */
function compare(ctx: Ctx, table: Table, results: Map<string, Round[]>, afterBurst: boolean): void {
  const cfRounds = results.get(CF_NAME);
  const floorRounds = results.get(FLOOR_NAME);
  const when = afterBurst ? ' (right after the batch burst)' : '';
  const lost = cfRounds?.reduce((n, r) => n + r.sub.missing + r.sub.duplicates, 0) ?? 0;
  const durable = results.get(FLOOR_COMMIT_NAME);
  if (cfRounds && durable) {
    const [cf, dc] = [best(cfRounds), best(durable)];
    table.notes.push(
      `commitfeed against the durable floor: p50 ${fmtMs(cf.p50)} vs ${fmtMs(dc.p50)} ms (+${fmtMs(cf.p50 - dc.p50)} ms), ` +
        `p99 ${fmtMs(cf.p99)} vs ${fmtMs(dc.p99)} ms (${(cf.p99 / dc.p99).toFixed(2)}×).`,
    );
  }
  if (cfRounds && floorRounds) {
    const cf = best(cfRounds);
    const fl = best(floorRounds);
    // A run whose publisher could not keep the rate measured a saturated machine, not the server:
    // the ratio of two such runs says nothing (both wait behind the same queue).
    const saturated = ![...cfRounds, ...floorRounds].every((r) => r.kept);
    if (saturated)
      table.notes.push(
        'A publisher fell below 95% of the rate in at least one run: the machine was saturated, so the comparison below is shown but not judged.',
      );
    const of = cfRounds.length > 1 ? `best of ${cfRounds.length}` : 'one run';
    table.notes.push(
      `commitfeed against the floor (${of} each): p50 ${fmtMs(cf.p50)} vs ${fmtMs(fl.p50)} ms (+${fmtMs(cf.p50 - fl.p50)} ms; load ${cf.p50Load} / ${fl.p50Load}), ` +
        `p99 ${fmtMs(cf.p99)} vs ${fmtMs(fl.p99)} ms (${(cf.p99 / fl.p99).toFixed(2)}×; load ${cf.p99Load} / ${fl.p99Load}).`,
    );
    ctx.checks.push({
      scenario: 3,
      what: `publish → SSE p99 ÷ the no-database floor's p99${when}`,
      target: '≤ 1.5×, nothing lost',
      got: `${fmtMs(cf.p99)} / ${fmtMs(fl.p99)} ms = ${(cf.p99 / fl.p99).toFixed(2)}× (${of}; load ${cf.p99Load} / ${fl.p99Load}), ${lost} missing or repeated`,
      pass: saturated ? undefined : cf.p99 <= 1.5 * fl.p99 && lost === 0,
    });
    ctx.checks.push({
      scenario: 3,
      what: `publish → SSE p50 − the no-database floor's p50${when}`,
      target: '≤ 1.5 ms',
      got: `${fmtMs(cf.p50)} − ${fmtMs(fl.p50)} = ${fmtMs(cf.p50 - fl.p50)} ms (${of}; load ${cf.p50Load} / ${fl.p50Load})`,
      pass: saturated ? undefined : cf.p50 - fl.p50 <= 1.5,
    });
    return;
  }
  const cf = cfRounds ? best(cfRounds) : undefined;
  ctx.checks.push({
    scenario: 3,
    what: `publish → SSE latency p50 / p99${when} (no floor measured)`,
    target: '≤ 3 ms / ≤ 15 ms, nothing lost',
    got: cf ? `${fmtMs(cf.p50)} / ${fmtMs(cf.p99)} ms, ${lost} missing or repeated` : 'not run',
    pass: cf ? cf.p50 <= 3 && cf.p99 <= 15 && lost === 0 : undefined,
  });
}
