// Scenario 5: one SSE client reads a long stream from `earliest` while new events keep arriving,
// and must get all of them in order, with no gap or repeat where the catch-up meets the live tail.
import http from 'node:http';
import pg from 'pg';
import { benchFile, type Ctx, log } from '../lib/context.ts';
import { Worker } from '../lib/proc.ts';
import { fmtMs, fmtNum, type Table } from '../lib/report.ts';
import { cpuMark, coresUsed } from '../lib/sys.ts';
import { httpPath, postJson } from '../lib/targets.ts';
import type { PublisherArgs, PublisherResult } from '../workers/publisher.ts';
import type { SubscriberArgs, SubscriberResult } from '../workers/subscriber.ts';
import { waitForTailer } from '../lib/delivery-run.ts';

const STREAM = 's5-catchup';

/** Preloads events {s: 0..n-1} in order: sequential batched publishes over HTTP (the default), or
 * straight SQL into commitfeed.feed (faster, but bypasses the service's write path). */
async function preload(ctx: Ctx, n: number): Promise<string> {
  const t0 = performance.now();
  let last = t0;
  if (ctx.opts.preload === 'sql') {
    const c = new pg.Client({ connectionString: ctx.dbUrl });
    await c.connect();
    try {
      for (let from = 0; from < n; from += 100_000) {
        const to = Math.min(n, from + 100_000) - 1;
        await c.query(
          `INSERT INTO commitfeed.feed (stream, type, data)
           SELECT $1, 'bench', json_build_object('s', g) FROM generate_series($2::int, $3::int) AS g ORDER BY g`,
          [STREAM, from, to],
        );
      }
    } finally {
      await c.end();
    }
  } else {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const port = ctx.commitfeed!.port;
    const batch = 1000;
    try {
      for (let from = 0; from < n; from += batch) {
        const events = [];
        for (let s = from; s < Math.min(n, from + batch); s++)
          events.push(`{"type":"bench","data":{"s":${s}}}`);
        const res = await postJson(agent, port, httpPath(STREAM), `[${events.join(',')}]`);
        if (res.status !== 201)
          throw new Error(`preload publish failed: HTTP ${res.status} ${res.body.slice(0, 200)}`);
        if (performance.now() - last > 5000) {
          last = performance.now();
          log(`  preloaded ${fmtNum(from + batch)} of ${fmtNum(n)}`);
        }
      }
    } finally {
      agent.destroy();
    }
  }
  const sec = (performance.now() - t0) / 1000;
  return `${ctx.opts.preload === 'sql' ? 'SQL INSERT ... generate_series, 100,000 rows per transaction' : 'sequential HTTP batches of 1,000'}: ${sec.toFixed(1)} s (${fmtNum(n / sec)} events/s)`;
}

export async function scenario5(ctx: Ctx): Promise<void> {
  const { opts } = ctx;
  const n = opts.catchupEvents;
  const liveRate = 200;
  const table: Table = {
    title: `Scenario 5: catch-up, one SSE client from \`earliest\` over ${fmtNum(n)} preloaded events, joining the live tail`,
    columns: ['metric', 'value'],
    rows: [],
    notes: [
      `While the client catches up, a sequential publisher adds ${liveRate} events/s to the same stream (sequence numbers continue after the preloaded ones); it stops 1 s after the client has caught up. ` +
        'The client checks every sequence number arrives exactly once and in order, across the hand-over from catch-up to the live tail.',
    ],
  };
  ctx.tables.push(table);
  if (!(await ctx.ensureCommitfeed(5))) {
    table.notes.push('commitfeed not running: skipped');
    return;
  }
  const server = ctx.commitfeed!;
  try {
    log(`scenario 5: preloading ${fmtNum(n)} events (${opts.preload})`);
    const how = await preload(ctx, n);
    table.rows.push(['preload', how]);
    if (opts.analyzeAfterPreload) {
      // What autovacuum would do after a bulk load; without it the planner has no row counts for
      // the partition and may read the whole stream for every page (see the note below).
      const t = performance.now();
      const c = new pg.Client({ connectionString: ctx.dbUrl });
      await c.connect();
      try {
        await c.query('ANALYZE commitfeed.feed');
      } finally {
        await c.end();
      }
      table.rows.push([
        'statistics',
        `ANALYZE commitfeed.feed after the preload (${((performance.now() - t) / 1000).toFixed(1)} s)`,
      ]);
      table.notes.push(
        "The machine's PostgreSQL runs with autovacuum=off, so nothing else would ever analyze the new rows. Without statistics (`--no-analyze`) the catch-up query was planned as a bitmap scan of the whole stream plus a sort for every 1,000-row page: a 1,000,000-event catch-up ran at about 1,000 events/s and did not finish in 180 s.",
      );
    } else table.rows.push(['statistics', 'none gathered after the preload (--no-analyze)']);
    const lag = await waitForTailer(server.port);
    if (lag) table.notes.push(lag);
    log('scenario 5: catching up');
    const subArgs: SubscriberArgs = {
      kind: 'sse',
      port: server.port,
      streams: [STREAM],
      from: 'earliest',
      catchupCount: n,
      strictOrder: true,
      label: 'catch-up',
    };
    const a = cpuMark(server.cp.pid);
    const sub = new Worker<SubscriberResult>('subscriber', benchFile('workers/subscriber.ts'), subArgs);
    let pubW: Worker<PublisherResult> | undefined;
    try {
      await sub.next('ready', 60_000);
      const pubArgs: PublisherArgs = {
        target: { kind: 'http', port: server.port },
        mode: 'sequential',
        streams: [STREAM],
        rate: liveRate,
        firstSeq: n,
        durationSec: 600,
        label: 'live tail',
      };
      pubW = new Worker<PublisherResult>('publisher', benchFile('workers/publisher.ts'), pubArgs);
      const t0 = performance.now();
      let caughtUp = true;
      try {
        await sub.next('caughtup', opts.catchupTimeoutSec * 1000);
      } catch (err) {
        if (!/no 'caughtup'/.test((err as Error).message)) throw err;
        caughtUp = false;
      }
      const b = cpuMark(server.cp.pid);
      const waitedSec = (performance.now() - t0) / 1000;
      if (caughtUp) await new Promise((r) => setTimeout(r, 1000));
      pubW.send({ type: 'stop' });
      const pub = await pubW.result(30_000);
      sub.send({
        type: 'expect',
        nextSeq: pub.nextSeq,
        failedSeqs: pub.failedSeqs,
        drainMs: caughtUp ? 10_000 : 0,
      });
      const r = await sub.result(70_000);
      const c = coresUsed(a, b);
      const cu = caughtUp
        ? r.catchup!
        : { events: r.received, sec: waitedSec, perSec: r.received / waitedSec };
      if (!caughtUp) {
        const msg = `scenario 5: catch-up did not finish within ${opts.catchupTimeoutSec} s: ${fmtNum(r.received)} of ${fmtNum(n)} events received (${fmtNum(cu.perSec)} events/s)`;
        ctx.problems.push(msg);
        table.notes.push(msg);
      }
      table.rows.push(
        [
          caughtUp
            ? 'catch-up time (connect → last preloaded event)'
            : 'catch-up NOT finished, stopped after',
          `${cu.sec.toFixed(2)} s`,
        ],
        ['catch-up rate', `${fmtNum(cu.perSec)} events/s`],
        [
          'CPU during catch-up: server / postgres / machine',
          `${c.server.toFixed(2)} / ${c.postgres.toFixed(2)} / ${c.machine.toFixed(2)} cores`,
        ],
        ['live events published meanwhile', `${fmtNum(pub.total)} (${pub.errors} errors)`],
        ['received / expected', `${fmtNum(r.received)} / ${fmtNum(r.expected)}`],
        [
          'missing / duplicates / out of order',
          `${r.missing} / ${r.duplicates} / ${r.strictOrderViolations}`,
        ],
        [
          'live-event latency p50 / p99 / max (includes waiting behind the catch-up)',
          `${fmtMs(r.latency.p50)} / ${fmtMs(r.latency.p99)} / ${fmtMs(r.latency.max)} ms`,
        ],
      );
      if (r.firstViolation) table.notes.push(`first order violation: ${r.firstViolation}`);
      const joined = caughtUp && r.missing === 0 && r.duplicates === 0 && r.strictOrderViolations === 0;
      if (caughtUp && !joined)
        ctx.problems.push(
          `scenario 5: catch-up → live hand-over: ${r.missing} missing, ${r.duplicates} duplicates, ${r.strictOrderViolations} out of order (${r.firstViolation ?? ''})`,
        );
      if (r.closes > 0)
        ctx.problems.push(`scenario 5: the SSE stream closed ${r.closes} times mid-run: ${r.firstClose}`);
      ctx.checks.push({
        scenario: 5,
        what: `catch-up from earliest over ${fmtNum(n)} events`,
        target: '≥ 100,000 events/s, joined without gap',
        got: `${fmtNum(cu.perSec)} events/s, ${joined ? 'no gap, no repeat' : caughtUp ? 'GAP OR REPEAT' : 'did not catch up'}`,
        pass: cu.perSec >= 100_000 && joined,
      });
      log(`  → ${fmtNum(cu.perSec)} events/s, ${joined ? 'joined without gap' : 'GAP'}`);
    } finally {
      await sub.stop();
      if (pubW) await pubW.stop();
    }
  } catch (err) {
    table.notes.push(`FAILED: ${(err as Error).message}`);
    ctx.problems.push(`scenario 5: ${(err as Error).message}`);
  }
}
