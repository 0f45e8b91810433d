// Scenarios 3, 4 and 6: publish → subscriber latency, fan-out to many connections, and the delivery
// pause while a long transaction holds the visibility horizon back. Publisher and subscribers are
// separate processes; latency = receive time − the CLOCK_MONOTONIC stamp put in the payload.
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { benchFile, type Ctx, log } from '../lib/context.ts';
import { Worker } from '../lib/proc.ts';
import { fmtMs, fmtNum, type Table } from '../lib/report.ts';
import { type CpuMark, coresUsed, cpuMark, treeRssKiB as rssKiB } from '../lib/sys.ts';
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
      'publish p99 ms',
      'client loop p99 ms',
    ],
    rows: [],
    notes: [
      'Open-loop publisher (single-event publishes, up to 64 in flight) and subscribers in two separate processes; each subscriber reads one stream, so every event goes to ' +
        `${opts.latencySubs / opts.latencyStreams} subscribers. Latency runs from just before the publish request is sent to the frame being parsed by the subscriber.`,
      `${opts.latencyDurationSec} s per system. "client loop p99" is the subscriber process's own event-loop delay: the part of the latency that is the measuring client's.`,
    ],
  };
  const runs: { name: string; sub: Omit<SubscriberArgs, 'label'>; target: Target }[] = [];
  if (await ctx.ensureCommitfeed(3))
    runs.push({
      name: 'commitfeed (SSE)',
      sub: { kind: 'sse', port: ctx.commitfeed!.port, streams: subStreams },
      target: { kind: 'http', port: ctx.commitfeed!.port },
    });
  if (ctx.naive && ctx.opts.peers.includes('naive'))
    runs.push({
      name: 'naive tx+notify, 50 ms polling SSE',
      sub: { kind: 'sse', port: ctx.naive.port, streams: subStreams },
      target: { kind: 'http', port: ctx.naive.port },
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
        fmtMs(pub.latency.p99),
        fmtMs(sub.loopDelayP99Ms),
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

export async function scenario4(ctx: Ctx): Promise<void> {
  const { opts } = ctx;
  const table: Table = {
    title: `Scenario 4: fan-out, ${fmtNum(opts.fanoutConns)} SSE connections on one commitfeed process, ${opts.fanoutRate} events/s over ${opts.fanoutStreams} shared streams`,
    columns: ['metric', 'value'],
    rows: [],
    notes: [
      `Each connection reads one of ${opts.fanoutStreams} streams (${fmtNum(opts.fanoutConns / opts.fanoutStreams)} per stream), so every event is delivered ${fmtNum(opts.fanoutConns / opts.fanoutStreams)} times. ` +
        'The subscribers are one separate process using a minimal raw-socket SSE client. RSS is VmRSS of the server process (with WORKERS=N, of the primary and its workers) from /proc.',
    ],
  };
  ctx.tables.push(table);
  if (!(await ctx.ensureCommitfeed(4))) {
    table.notes.push('commitfeed not running: skipped');
    return;
  }
  // A fresh server process, warmed with a short run, so the RSS baseline is not what earlier
  // scenarios left behind for the garbage collector.
  if (!(await ctx.restartCommitfeed(4))) {
    table.notes.push('commitfeed did not restart: skipped');
    return;
  }
  const server = ctx.commitfeed!;
  const pid = server.cp.pid!;
  const streams = Array.from({ length: opts.fanoutStreams }, (_, i) => `s4-fan-${i}`);
  await runDelivery({
    label: 'fan-out warm-up',
    sub: { kind: 'sse', port: server.port, streams },
    pub: { target: { kind: 'http', port: server.port }, mode: 'rate', streams, rate: 100, durationSec: 1 },
    drainMs: 2000,
  });
  await sleep(1000);
  const subStreams = Array.from({ length: opts.fanoutConns }, (_, i) => streams[i % streams.length]);
  const rssBefore = rssKiB(pid);
  let rssConnected = Number.NaN;
  let rssPeak = 0;
  log(
    `scenario 4: connecting ${fmtNum(opts.fanoutConns)} SSE subscribers (server RSS ${fmtNum(rssBefore / 1024, 1)} MiB)`,
  );
  let cpuA: CpuMark | undefined;
  try {
    const t0 = performance.now();
    const { sub, pub, connected, subCpuSec } = await runDelivery({
      label: 'fan-out',
      notes: table.notes,
      sub: { kind: 'sse', port: server.port, streams: subStreams, connectBatch: 256 },
      pub: {
        target: { kind: 'http', port: server.port },
        mode: 'rate',
        streams,
        rate: opts.fanoutRate,
        durationSec: opts.fanoutDurationSec,
      },
      drainMs: 15_000,
      connectTimeoutMs: 300_000,
      onReady: () => {
        cpuA = cpuMark(pid);
        rssConnected = rssKiB(pid);
        rssPeak = rssConnected;
        log(
          `  all connected in ${((performance.now() - t0) / 1000).toFixed(1)} s, server RSS ${fmtNum(rssConnected / 1024, 1)} MiB; publishing`,
        );
      },
      onTick: () => {
        rssPeak = Math.max(rssPeak, rssKiB(pid));
      },
    });
    // Cores from all connected to the end of the drain (publishing and delivering).
    const cores = cpuA ? coresUsed(cpuA, cpuMark(pid)) : undefined;
    const perConn = (rssConnected - rssBefore) / connected;
    const perConnPeak = (rssPeak - rssBefore) / connected;
    const deliverSec = pub.elapsedSec + sub.drainSec;
    table.rows.push(
      [
        'connections open',
        `${fmtNum(connected)} of ${fmtNum(opts.fanoutConns)} (connect took ${sub.connectSec.toFixed(1)} s)`,
      ],
      ['events published', `${fmtNum(pub.total)} in ${pub.elapsedSec.toFixed(1)} s (${pub.errors} errors)`],
      ['deliveries received / expected', `${fmtNum(sub.received)} / ${fmtNum(sub.expected)}`],
      ['deliveries/s (received ÷ (publish time + drain))', fmtNum(sub.received / deliverSec)],
      [
        'subscribers that got every event exactly once',
        `${fmtNum(sub.complete)} of ${fmtNum(sub.subscribers)}`,
      ],
      ['missing / duplicate deliveries', `${fmtNum(sub.missing)} / ${fmtNum(sub.duplicates)}`],
      ['streams whose subscribers disagree on order', String(sub.orderMismatches)],
      [
        'delivery latency p50 / p90 / p99 / max',
        `${fmtMs(sub.latency.p50)} / ${fmtMs(sub.latency.p90)} / ${fmtMs(sub.latency.p99)} / ${fmtMs(sub.latency.max)} ms`,
      ],
      [
        'server RSS before / connected / peak',
        `${fmtNum(rssBefore / 1024, 1)} / ${fmtNum(rssConnected / 1024, 1)} / ${fmtNum(rssPeak / 1024, 1)} MiB`,
      ],
      [
        'RSS per connection, idle / peak while publishing',
        `${fmtNum(perConn, 1)} KiB / ${fmtNum(perConnPeak, 1)} KiB`,
      ],
      ['drain after the publisher stopped', `${sub.drainSec.toFixed(1)} s`],
      [
        'CPU cores while publishing and draining: server / postgres / whole machine',
        cores
          ? `${cores.server.toFixed(2)} / ${cores.postgres.toFixed(2)} / ${cores.machine.toFixed(2)} (the load processes and other work are the rest)`
          : 'n/a',
      ],
      [
        'subscriber process: CPU, event-loop delay p99 / max',
        `${subCpuSec.toFixed(1)} CPU-s; ${fmtMs(sub.loopDelayP99Ms)} / ${fmtMs(sub.loopDelayMaxMs)} ms`,
      ],
    );
    table.notes.push(...problemsOf(ctx, 4, 'commitfeed', sub, pub));
    ctx.checks.push({
      scenario: 4,
      what: `${fmtNum(opts.fanoutConns)} SSE connections: memory per connection (peak)`,
      target: '≤ 30 KB each',
      got: `${fmtNum(perConnPeak, 1)} KiB`,
      pass: connected === opts.fanoutConns ? perConnPeak <= 30 : false,
    });
    ctx.checks.push({
      scenario: 4,
      what: 'fan-out: every subscriber got every event',
      target: 'all, exactly once',
      got: `${fmtNum(sub.complete)} of ${fmtNum(sub.subscribers)} complete; p99 ${fmtMs(sub.latency.p99)} ms`,
      pass: sub.complete === sub.subscribers && sub.duplicates === 0,
    });
  } catch (err) {
    table.notes.push(`FAILED: ${(err as Error).message}`);
    ctx.problems.push(`scenario 4: ${(err as Error).message}`);
  }
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
