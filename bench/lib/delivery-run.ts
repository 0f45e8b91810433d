// What every delivery run (scenarios 3, 4, 6, 7) shares: one run of a subscriber process and a
// publisher process against one system, waiting for commitfeed's tailer before a run, and the
// table cells and problems a run reports.
import { setTimeout as sleep } from 'node:timers/promises';
import type { PublisherArgs, PublisherResult } from '../workers/publisher.ts';
import type { SubscriberArgs, SubscriberResult } from '../workers/subscriber.ts';
import { benchFile, type Ctx, log } from './context.ts';
import { Worker } from './proc.ts';
import { fmtMs, fmtNum } from './report.ts';
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

export function deliveryCells(s: SubscriberResult): string[] {
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

export function problemsOf(
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
