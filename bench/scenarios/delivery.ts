// Scenarios 4 and 6 (fan-out to many connections, the delivery pause while a long transaction holds
// the visibility horizon back) and what every delivery run shares (scenario 3 is latency.ts).
// Publisher and subscribers are separate processes; latency = receive time − the CLOCK_MONOTONIC
// stamp put in the payload.
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { benchFile, type Ctx, log } from '../lib/context.ts';
import { deliveryCells, problemsOf, runDelivery, waitForTailer } from '../lib/delivery-run.ts';
import { spawnNode, stop, waitForHttp } from '../lib/proc.ts';
import { fmtMs, fmtNum, type Table } from '../lib/report.ts';
import { treeCpuSeconds as cpuSeconds, treeRssKiB as rssKiB } from '../lib/sys.ts';
import type { SubscriberResult } from '../workers/subscriber.ts';

interface FanoutResult {
  connected: number;
  pubTotal: number;
  pubElapsedSec: number;
  pubErrors: number;
  sub: SubscriberResult;
  subCpuSec: number;
  rssBefore: number;
  rssConnected: number;
  rssPeak: number;
  /** Server CPU seconds from the publisher's first send to the end of the drain. */
  serverCpuSec: number;
}

/**
 * One fan-out run against the server at `port` (process `pid`): a short warm-up so the RSS baseline
 * is not start-up garbage, then `opts.fanoutConns` subscribers, then the publisher.
 */
async function fanoutRun(ctx: Ctx, label: string, port: number, pid: number, notes: string[]) {
  const { opts } = ctx;
  const streams = Array.from({ length: opts.fanoutStreams }, (_, i) => `s4-fan-${i}`);
  await runDelivery({
    label: `${label} warm-up`,
    sub: { kind: 'sse', port, streams },
    pub: { target: { kind: 'http', port }, mode: 'rate', streams, rate: 100, durationSec: 1 },
    drainMs: 2000,
  });
  await sleep(1000);
  const subStreams = Array.from({ length: opts.fanoutConns }, (_, i) => streams[i % streams.length]);
  const rssBefore = rssKiB(pid);
  let rssConnected = Number.NaN;
  let rssPeak = 0;
  let cpuAtReady = Number.NaN;
  log(
    `scenario 4: ${label}: connecting ${fmtNum(opts.fanoutConns)} SSE subscribers (server RSS ${fmtNum(rssBefore / 1024, 1)} MiB)`,
  );
  const t0 = performance.now();
  const { sub, pub, connected, subCpuSec } = await runDelivery({
    label,
    notes,
    sub: { kind: 'sse', port, streams: subStreams, connectBatch: 256 },
    pub: {
      target: { kind: 'http', port },
      mode: 'rate',
      streams,
      rate: opts.fanoutRate,
      durationSec: opts.fanoutDurationSec,
    },
    drainMs: 15_000,
    connectTimeoutMs: 300_000,
    onReady: () => {
      rssConnected = rssKiB(pid);
      rssPeak = rssConnected;
      cpuAtReady = cpuSeconds(pid);
      log(
        `  all connected in ${((performance.now() - t0) / 1000).toFixed(1)} s, server RSS ${fmtNum(rssConnected / 1024, 1)} MiB; publishing`,
      );
    },
    onTick: () => {
      rssPeak = Math.max(rssPeak, rssKiB(pid));
    },
  });
  rssPeak = Math.max(rssPeak, rssKiB(pid));
  const r: FanoutResult = {
    connected,
    pubTotal: pub.total,
    pubElapsedSec: pub.elapsedSec,
    pubErrors: pub.errors,
    sub,
    subCpuSec,
    rssBefore,
    rssConnected,
    rssPeak,
    serverCpuSec: cpuSeconds(pid) - cpuAtReady,
  };
  return { r, pub };
}

export async function scenario4(ctx: Ctx): Promise<void> {
  const { opts } = ctx;
  const withRaw = opts.peers.includes('raw-fanout');
  const systems = ['commitfeed', ...(withRaw ? ['raw node:http broadcaster'] : [])];
  const table: Table = {
    title: `Scenario 4: fan-out, ${fmtNum(opts.fanoutConns)} SSE connections on one server process, ${opts.fanoutRate} events/s over ${opts.fanoutStreams} shared streams`,
    columns: ['metric', ...systems, ...(withRaw ? ['commitfeed ÷ raw'] : [])],
    rows: [],
    notes: [
      `Each connection reads one of ${opts.fanoutStreams} streams (${fmtNum(opts.fanoutConns / opts.fanoutStreams)} per stream), so every event is delivered ${fmtNum(opts.fanoutConns / opts.fanoutStreams)} times. ` +
        'The subscribers are one separate process using a minimal raw-socket SSE client. RSS is VmRSS of the server process (with WORKERS=N, of the primary and its workers) from /proc.',
    ],
  };
  if (withRaw)
    table.notes.push(
      'The raw broadcaster (bench/peers/raw-broadcaster.ts) is node:http with nothing but fan-out: frames built once per event and coalesced per subscriber per event-loop turn, ' +
        'no database, no history or resume, no backpressure or slow-subscriber handling. It runs after commitfeed, on the same machine, in the same bench run.',
    );
  ctx.tables.push(table);
  const results: (FanoutResult | undefined)[] = [];

  // commitfeed: a fresh server process, so the RSS baseline is not what earlier scenarios left
  // behind for the garbage collector.
  if (!(await ctx.ensureCommitfeed(4)) || !(await ctx.restartCommitfeed(4))) {
    table.notes.push('commitfeed not running: skipped');
    results.push(undefined);
  } else {
    try {
      const server = ctx.commitfeed!;
      const { r, pub } = await fanoutRun(ctx, 'commitfeed', server.port, server.cp.pid!, table.notes);
      results.push(r);
      table.notes.push(...problemsOf(ctx, 4, 'commitfeed', r.sub, pub));
      const perConnPeak = (r.rssPeak - r.rssBefore) / r.connected;
      ctx.checks.push({
        scenario: 4,
        what: `${fmtNum(opts.fanoutConns)} SSE connections: memory per connection (peak)`,
        target: '≤ 30 KB each',
        got: `${fmtNum(perConnPeak, 1)} KiB`,
        pass: r.connected === opts.fanoutConns ? perConnPeak <= 30 : false,
      });
      ctx.checks.push({
        scenario: 4,
        what: 'fan-out: every subscriber got every event',
        target: 'all, exactly once',
        got: `${fmtNum(r.sub.complete)} of ${fmtNum(r.sub.subscribers)} complete; p99 ${fmtMs(r.sub.latency.p99)} ms`,
        pass: r.sub.complete === r.sub.subscribers && r.sub.duplicates === 0,
      });
    } catch (err) {
      results.push(undefined);
      table.notes.push(`commitfeed: FAILED: ${(err as Error).message}`);
      ctx.problems.push(`scenario 4: ${(err as Error).message}`);
    }
    // The raw peer gets the machine to itself, as commitfeed did.
    if (withRaw && ctx.commitfeed) {
      await stop(ctx.commitfeed.cp, 10_000);
      ctx.commitfeed = undefined;
    }
  }

  if (withRaw) {
    const logFile = benchFile('.logs/raw-broadcaster.log');
    const cp = spawnNode(benchFile('peers/raw-broadcaster.ts'), [], {
      env: { PORT: String(opts.rawPort) },
      logFile,
    });
    try {
      await waitForHttp(`http://127.0.0.1:${opts.rawPort}/readyz`, cp, 30_000);
      const { r, pub } = await fanoutRun(
        ctx,
        'raw node:http broadcaster',
        opts.rawPort,
        cp.pid!,
        table.notes,
      );
      results.push(r);
      table.notes.push(...problemsOf(ctx, 4, 'raw node:http broadcaster', r.sub, pub));
    } catch (err) {
      results.push(undefined);
      table.notes.push(`raw node:http broadcaster: FAILED: ${(err as Error).message}`);
    } finally {
      await stop(cp);
    }
  }

  const [cf, raw] = results;
  const na = 'n/a';
  const deliveriesPerS = (r: FanoutResult) => r.sub.received / (r.pubElapsedSec + r.sub.drainSec);
  const perConn = (r: FanoutResult) => (r.rssConnected - r.rssBefore) / r.connected;
  const perConnPeak = (r: FanoutResult) => (r.rssPeak - r.rssBefore) / r.connected;
  const cpuPerM = (r: FanoutResult) => (r.serverCpuSec / Math.max(1, r.sub.received)) * 1e6;
  const pct = (a: number, b: number) =>
    Number.isFinite(a) && Number.isFinite(b) && b > 0 ? `${fmtNum((100 * a) / b)}%` : na;
  const row = (
    metric: string,
    show: (r: FanoutResult) => string,
    ratio?: (r: FanoutResult) => number,
  ): string[] => {
    const cells = [metric, ...results.map((r) => (r ? show(r) : na))];
    if (withRaw) cells.push(ratio && cf && raw ? pct(ratio(cf), ratio(raw)) : '');
    return cells;
  };
  table.rows.push(
    row(
      'connections open',
      (r) =>
        `${fmtNum(r.connected)} of ${fmtNum(opts.fanoutConns)} (connect took ${r.sub.connectSec.toFixed(1)} s)`,
    ),
    row(
      'events published',
      (r) => `${fmtNum(r.pubTotal)} in ${r.pubElapsedSec.toFixed(1)} s (${r.pubErrors} errors)`,
    ),
    row('deliveries received / expected', (r) => `${fmtNum(r.sub.received)} / ${fmtNum(r.sub.expected)}`),
    row('deliveries/s (received ÷ (publish time + drain))', (r) => fmtNum(deliveriesPerS(r)), deliveriesPerS),
    row(
      'subscribers that got every event exactly once',
      (r) => `${fmtNum(r.sub.complete)} of ${fmtNum(r.sub.subscribers)}`,
    ),
    row('missing / duplicate deliveries', (r) => `${fmtNum(r.sub.missing)} / ${fmtNum(r.sub.duplicates)}`),
    row('streams whose subscribers disagree on order', (r) => String(r.sub.orderMismatches)),
    row(
      'delivery latency p50 / p90 / p99 / max',
      (r) =>
        `${fmtMs(r.sub.latency.p50)} / ${fmtMs(r.sub.latency.p90)} / ${fmtMs(r.sub.latency.p99)} / ${fmtMs(r.sub.latency.max)} ms`,
      (r) => r.sub.latency.p99,
    ),
    row(
      'server RSS before / connected / peak',
      (r) =>
        `${fmtNum(r.rssBefore / 1024, 1)} / ${fmtNum(r.rssConnected / 1024, 1)} / ${fmtNum(r.rssPeak / 1024, 1)} MiB`,
    ),
    row('RSS per connection, idle', (r) => `${fmtNum(perConn(r), 1)} KiB`, perConn),
    row('RSS per connection, peak while publishing', (r) => `${fmtNum(perConnPeak(r), 1)} KiB`, perConnPeak),
    row(
      'server CPU while publishing and draining; per million deliveries',
      (r) => `${r.serverCpuSec.toFixed(1)} CPU-s; ${cpuPerM(r).toFixed(1)} CPU-s`,
      cpuPerM,
    ),
    row('drain after the publisher stopped', (r) => `${r.sub.drainSec.toFixed(1)} s`),
    row(
      'subscriber process: CPU, event-loop delay p99 / max',
      (r) =>
        `${r.subCpuSec.toFixed(1)} CPU-s; ${fmtMs(r.sub.loopDelayP99Ms)} / ${fmtMs(r.sub.loopDelayMaxMs)} ms`,
    ),
  );
  if (withRaw)
    table.notes.push(
      'The ratio column is commitfeed as a share of the raw broadcaster: for deliveries/s higher is better; for latency, memory and CPU lower is better.',
    );
  if (withRaw && cf && raw)
    ctx.checks.push({
      scenario: 4,
      what: 'fan-out deliveries/s against the raw node:http broadcaster (same run)',
      target: '≥ 100%',
      got: pct(deliveriesPerS(cf), deliveriesPerS(raw)),
      pass: deliveriesPerS(cf) >= deliveriesPerS(raw) * 0.995 && cf.sub.complete === cf.sub.subscribers,
    });
}

/** Holds a writing transaction open for `ms`: it inserts one marker row into `table` (or, if that
 * fails, only takes a transaction id), so the marker must be delivered once it commits. */
async function holdTransaction(dbUrl: string, table: string, stream: string, ms: number): Promise<string> {
  const c = new pg.Client({ connectionString: dbUrl });
  c.on('error', () => {});
  await c.connect();
  try {
    await c.query('BEGIN');
    let how = 'inserted a marker row';
    try {
      await c.query(`INSERT INTO ${table} (stream, type, data) VALUES ($1, 'held', '{"held":true}')`, [
        stream,
      ]);
    } catch (err) {
      await c.query('ROLLBACK');
      await c.query('BEGIN');
      await c.query('SELECT pg_current_xact_id()');
      how = `took an xid only (marker insert failed: ${(err as Error).message})`;
    }
    await sleep(ms);
    await c.query('COMMIT');
    return how;
  } finally {
    await c.end();
  }
}

export async function scenario6(ctx: Ctx): Promise<void> {
  const { opts } = ctx;
  const rate = 200;
  const before = 1000;
  const after = 2000;
  const subsPerStream = 10;
  const table: Table = {
    title: `Scenario 6: horizon stall, a writing transaction held open ${opts.stallMs / 1000} s while ${rate} events/s are published`,
    columns: [
      'system',
      'published',
      'p50 ms',
      'p90 ms',
      'p99 ms',
      'max ms',
      'delivered / expected',
      'missing',
      'dup',
      'held row delivered',
      'longest pause ms',
    ],
    rows: [],
    notes: [
      `${subsPerStream} subscribers on one stream. ${before / 1000} s into publishing, another connection opens a transaction, inserts one marker row into the system's own feed table for that stream, holds it ${opts.stallMs} ms, and commits.`,
      '"held row delivered" counts subscribers that received the marker after its commit; "longest pause" is the largest gap between two consecutive events at one subscriber.',
    ],
  };
  const runs: { name: string; port: number; table: string }[] = [];
  if (await ctx.ensureCommitfeed(6))
    runs.push({ name: 'commitfeed', port: ctx.commitfeed!.port, table: 'commitfeed.feed' });
  if (ctx.naive && opts.peers.includes('naive'))
    runs.push({ name: 'naive, id > cursor polling', port: ctx.naive.port, table: 'naive.feed' });
  for (const run of runs) {
    const stream = `s6-stall-${run.name.split(' ')[0].replace(/\W/g, '')}`;
    log(`scenario 6: ${run.name}`);
    let how = '';
    try {
      if (run.name === 'commitfeed') {
        const lag = await waitForTailer(run.port);
        if (lag) table.notes.push(lag);
      }
      const { sub, pub } = await runDelivery({
        label: run.name,
        notes: table.notes,
        sub: { kind: 'sse', port: run.port, streams: Array(subsPerStream).fill(stream) },
        pub: {
          target: { kind: 'http', port: run.port },
          mode: 'rate',
          streams: [stream],
          rate,
          durationSec: (before + opts.stallMs + after) / 1000,
        },
        drainMs: 5000,
        during: async () => {
          await sleep(before);
          how = await holdTransaction(ctx.dbUrl, run.table, stream, opts.stallMs);
        },
      });
      table.rows.push([
        run.name,
        fmtNum(pub.total),
        ...deliveryCells(sub),
        `${sub.heldMarkers} of ${sub.subscribers}`,
        fmtMs(sub.maxGapMs),
      ]);
      table.notes.push(
        `${run.name}: the held transaction ${how}.`,
        ...problemsOf(ctx, 6, run.name, sub, pub),
      );
      if (run.name === 'commitfeed') {
        ctx.checks.push({
          scenario: 6,
          what: `horizon stall of ${opts.stallMs} ms: nothing lost`,
          target: 'all delivered, incl. the held row',
          got: `${sub.missing} missing, held row at ${sub.heldMarkers}/${sub.subscribers}, pause ${fmtMs(sub.maxGapMs)} ms`,
          pass:
            sub.missing === 0 &&
            sub.duplicates === 0 &&
            (how !== 'inserted a marker row' || sub.heldMarkers === sub.subscribers),
        });
        if (how === 'inserted a marker row' && sub.heldMarkers !== sub.subscribers)
          ctx.problems.push(
            `scenario 6: the held transaction's row reached ${sub.heldMarkers} of ${sub.subscribers} subscribers`,
          );
      }
      log(
        `  → longest pause ${fmtMs(sub.maxGapMs)} ms, missing ${sub.missing}, held row at ${sub.heldMarkers}/${sub.subscribers}`,
      );
    } catch (err) {
      table.notes.push(`${run.name}: FAILED: ${(err as Error).message}`);
      if (run.name === 'commitfeed') ctx.problems.push(`scenario 6: ${(err as Error).message}`);
    }
  }
  ctx.tables.push(table);
}
