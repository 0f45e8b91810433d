// Scenarios 3, 4 and 6: publish → subscriber latency, fan-out to many connections, and the delivery
// pause while a long transaction holds the visibility horizon back. Publisher and subscribers are
// separate processes; latency = receive time − the CLOCK_MONOTONIC stamp put in the payload.
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { benchFile, type Ctx, log } from '../lib/context.ts';
import { spawnNode, stop, waitForHttp, Worker } from '../lib/proc.ts';
import { fmtMs, fmtNum, type Table } from '../lib/report.ts';
import { treeCpuSeconds as cpuSeconds, treeRssKiB as rssKiB } from '../lib/sys.ts';
import type { Target } from '../lib/targets.ts';
import type { PublisherArgs, PublisherResult } from '../workers/publisher.ts';
import type { SubscriberArgs, SubscriberResult } from '../workers/subscriber.ts';

interface DeliveryRun {
  label: string;
  sub: Omit<SubscriberArgs, 'label'>;
  pub: Omit<PublisherArgs, 'label'>;
  drainMs: number;
  /** Runs while the publisher runs (e.g. the held transaction). */
  during?: () => Promise<void>;
  /** Called when every subscriber is connected, and every 500 ms while publishing. */
  onReady?: () => void;
  onTick?: () => void;
  connectTimeoutMs?: number;
  /** Receives remarks worth printing under the table (e.g. slow priming). */
  notes?: string[];
}

export async function runDelivery(
  r: DeliveryRun,
): Promise<{ sub: SubscriberResult; pub: PublisherResult; connected: number; subCpuSec: number }> {
  const sub = new Worker<SubscriberResult>('subscriber', benchFile('workers/subscriber.ts'), {
    ...r.sub,
    label: r.label,
  });
  let pubW: Worker<PublisherResult> | undefined;
  try {
    const ready = await sub.next('ready', r.connectTimeoutMs ?? 120_000);
    const connected = Number(ready['connected']);
    if (r.sub.kind === 'sse') {
      const primed = Number(ready['primed']);
      const slow = Number(ready['primeMaxMs']) > 1000 || primed < connected;
      const msg = `${r.label}: ${primed} of ${connected} subscribers primed an id at connect (connect → primed p50 ${fmtMs(Number(ready['primeP50Ms']))} ms, max ${fmtMs(Number(ready['primeMaxMs']))} ms)`;
      if (slow) log(`  ${msg}`);
      r.notes?.push(msg);
    }
    if (Number(ready['failed']) > 0)
      log(
        `  ${r.label}: ${ready['failed']} subscribers failed to connect: ${String(ready['firstConnectError'])}`,
      );
    r.onReady?.();
    pubW = new Worker<PublisherResult>('publisher', benchFile('workers/publisher.ts'), {
      ...r.pub,
      label: r.label,
    });
    // Time the rest from the publisher's first send, not from its process start.
    await pubW.next('started', 60_000);
    const tick = r.onTick ? setInterval(r.onTick, 500) : undefined;
    const during = r.during?.();
    let pub: PublisherResult;
    try {
      pub = await pubW.result(r.pub.durationSec * 1000 + 60_000);
      await during;
    } finally {
      clearInterval(tick);
    }
    sub.send({ type: 'expect', nextSeq: pub.nextSeq, failedSeqs: pub.failedSeqs, drainMs: r.drainMs });
    const result = await sub.result(r.drainMs + 60_000);
    return { sub: result, pub, connected, subCpuSec: sub.cpuSec };
  } finally {
    await sub.stop();
    if (pubW) await pubW.stop();
  }
}

/**
 * Waits until commitfeed's tailer has read every event written so far (its /metrics counters), so a
 * latency run does not start behind the backlog an earlier scenario left; says how far behind it was.
 */
export async function waitForTailer(port: number, timeoutMs = 180_000): Promise<string | undefined> {
  const read = async () => {
    const text = await (
      await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(5000) })
    ).text();
    const get = (name: string) => Number(new RegExp(`^${name} (\\S+)`, 'm').exec(text)?.[1] ?? Number.NaN);
    return { written: get('commitfeed_events_written_total'), read: get('commitfeed_tailer_events_total') };
  };
  try {
    const t0 = performance.now();
    const first = await read();
    if (!Number.isFinite(first.written) || !Number.isFinite(first.read)) return undefined;
    let now = first;
    while (now.read < now.written && performance.now() - t0 < timeoutMs) {
      await sleep(250);
      now = await read();
    }
    const behind = first.written - first.read;
    if (behind <= 0) return undefined;
    const sec = (performance.now() - t0) / 1000;
    const msg =
      now.read < now.written
        ? `commitfeed's tailer was ${fmtNum(behind)} events behind the writes when this scenario began, and still ${fmtNum(now.written - now.read)} behind after ${sec.toFixed(0)} s`
        : `commitfeed's tailer was ${fmtNum(behind)} events behind the writes when this scenario began; the bench waited ${sec.toFixed(1)} s for it to catch up before measuring`;
    log(`  ${msg}`);
    return msg;
  } catch {
    return undefined;
  }
}

function deliveryCells(s: SubscriberResult): string[] {
  return [
    fmtMs(s.latency.p50),
    fmtMs(s.latency.p90),
    fmtMs(s.latency.p99),
    fmtMs(s.latency.max),
    `${fmtNum(s.received)} / ${fmtNum(s.expected)}`,
    String(s.missing),
    String(s.duplicates),
  ];
}

function problemsOf(
  ctx: Ctx,
  scenario: number,
  name: string,
  s: SubscriberResult,
  p: PublisherResult,
): string[] {
  const out: string[] = [];
  if (s.missing > 0)
    out.push(
      `${name}: ${s.missing} deliveries missing (${s.subscribers - s.complete} subscribers incomplete)`,
    );
  if (s.duplicates > 0) out.push(`${name}: ${s.duplicates} duplicate deliveries, first: ${s.firstDuplicate}`);
  if (s.orderMismatches > 0)
    out.push(`${name}: subscribers of ${s.orderMismatches} streams saw different orders`);
  if (s.connectFailed > 0)
    out.push(`${name}: ${s.connectFailed} subscribers failed to connect: ${s.firstConnectError}`);
  if (s.closes > 0)
    out.push(`${name}: ${s.closes} subscriptions closed mid-run (${s.reconnects} resumed): ${s.firstClose}`);
  if (p.errors > 0)
    out.push(
      `${name}: ${p.errors} publishes failed (${s.ambiguous} deliveries of them seen anyway, not counted): ${p.firstError}`,
    );
  if (name.startsWith('commitfeed')) for (const o of out) ctx.problems.push(`scenario ${scenario}, ${o}`);
  return out;
}

/** Scenario 3's untimed warm-up per system, in seconds. */
const WARMUP_SEC = 2;

export async function scenario3(ctx: Ctx): Promise<void> {
  const { opts } = ctx;
  const streams = Array.from({ length: opts.latencyStreams }, (_, i) => `s3-lat-${i}`);
  const subStreams = Array.from({ length: opts.latencySubs }, (_, i) => streams[i % streams.length]);
  const table: Table = {
    title: `Scenario 3: publish → subscriber latency, ${fmtNum(opts.latencyRate)} events/s over ${opts.latencyStreams} streams, ${opts.latencySubs} subscribers`,
    columns: [
      'system',
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
    ],
    rows: [],
    notes: [
      'Open-loop publisher (single-event publishes, up to 64 in flight) and subscribers in two separate processes; each subscriber reads one stream, so every event goes to ' +
        `${opts.latencySubs / opts.latencyStreams} subscribers. Latency runs from just before the publish request is sent to the frame being parsed by the subscriber.`,
      `${opts.latencyDurationSec} s per system, after ${WARMUP_SEC} s of the same load on other streams (not measured). "client loop p99" is the subscriber process's own event-loop delay: the part of the latency that is the measuring client's.`,
    ],
  };
  const runs: { name: string; sub: Omit<SubscriberArgs, 'label'>; target: Target; pid?: number }[] = [];
  if (await ctx.ensureCommitfeed(3))
    runs.push({
      name: 'commitfeed (SSE)',
      sub: { kind: 'sse', port: ctx.commitfeed!.port, streams: subStreams },
      target: { kind: 'http', port: ctx.commitfeed!.port },
      pid: ctx.commitfeed!.cp.pid,
    });
  if (ctx.naive && ctx.opts.peers.includes('naive'))
    runs.push({
      name: 'naive tx+notify, 50 ms polling SSE',
      sub: { kind: 'sse', port: ctx.naive.port, streams: subStreams },
      target: { kind: 'http', port: ctx.naive.port },
      pid: ctx.naive.cp.pid,
    });
  if (opts.peers.includes('nats')) {
    if (ctx.nats.ok)
      runs.push({
        name: 'NATS JetStream push consumers',
        sub: { kind: 'nats', streams: subStreams },
        target: { kind: 'nats' },
      });
    else table.notes.push(`NATS: SKIPPED, ${ctx.nats.reason}`);
  }
  if (opts.peers.includes('redis')) {
    if (ctx.redis.ok)
      runs.push({
        name: 'Redis XADD + XREAD BLOCK',
        sub: { kind: 'redis', streams: subStreams },
        target: { kind: 'redis' },
      });
    else table.notes.push(`Redis: SKIPPED, ${ctx.redis.reason}`);
  }
  let cf: SubscriberResult | undefined;
  for (const run of runs) {
    log(`scenario 3: ${run.name}`);
    try {
      if (run.name.startsWith('commitfeed')) {
        const lag = await waitForTailer(ctx.commitfeed!.port);
        if (lag) table.notes.push(lag);
      }
      // A short untimed run first, on streams of its own: a process that has not yet served this
      // path (scenario 3 first in a run) spends its first second compiling it, and one stall of
      // ~100 ms is the whole p99 of 10,000 publishes. Scenario 1's warm-up curve measures that.
      await runDelivery({
        label: `${run.name} warm-up`,
        sub: { ...run.sub, streams: run.sub.streams.map((s) => `${s}-warm`) },
        pub: {
          target: run.target,
          mode: 'rate',
          streams: streams.map((s) => `${s}-warm`),
          rate: opts.latencyRate,
          durationSec: WARMUP_SEC,
        },
        drainMs: 2000,
      });
      const cpu0 = run.pid ? cpuSeconds(run.pid) : Number.NaN;
      const t0 = performance.now();
      const { sub, pub } = await runDelivery({
        label: run.name,
        notes: table.notes,
        sub: run.sub,
        pub: {
          target: run.target,
          mode: 'rate',
          streams,
          rate: opts.latencyRate,
          durationSec: opts.latencyDurationSec,
        },
        drainMs: 5000,
      });
      if (run.name.startsWith('commitfeed')) cf = sub;
      table.rows.push([
        run.name,
        fmtNum(pub.total / pub.elapsedSec),
        ...deliveryCells(sub),
        `${fmtMs(pub.latency.p50)} / ${fmtMs(pub.latency.p99)}`,
        fmtMs(sub.loopDelayP99Ms),
        // Over the whole run (connect, publishing, drain): a comparison between runs, not a rate.
        run.pid ? ((cpuSeconds(run.pid) - cpu0) / ((performance.now() - t0) / 1000)).toFixed(2) : '–',
      ]);
      table.notes.push(...problemsOf(ctx, 3, run.name, sub, pub));
      if (pub.throttled > 0)
        table.notes.push(
          `${run.name}: publisher fell behind its rate ${pub.throttled} times (256 in flight)`,
        );
      log(`  → p50 ${fmtMs(sub.latency.p50)} ms, p99 ${fmtMs(sub.latency.p99)} ms, missing ${sub.missing}`);
    } catch (err) {
      table.notes.push(`${run.name}: FAILED: ${(err as Error).message}`);
      if (run.name.startsWith('commitfeed')) ctx.problems.push(`scenario 3: ${(err as Error).message}`);
    }
  }
  ctx.tables.push(table);
  ctx.checks.push({
    scenario: 3,
    what: 'publish → SSE latency p50 / p99',
    target: '≤ 3 ms / ≤ 15 ms, nothing lost',
    got: cf ? `${fmtMs(cf.latency.p50)} / ${fmtMs(cf.latency.p99)} ms, ${cf.missing} missing` : 'not run',
    pass: cf ? cf.latency.p50 <= 3 && cf.latency.p99 <= 15 && cf.missing === 0 : undefined,
  });
}

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
