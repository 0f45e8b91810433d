// Subscriber process: holds many subscriptions (SSE, JetStream push consumers or Redis XREAD
// BLOCK loops), measures publish→receive latency from the `t` the publisher stamped into each
// payload, and checks delivery: every subscriber got every event of its stream exactly once, and
// all subscribers of a stream saw the same order.
//
// Protocol with the parent: → ready {connected, failed}  ← expect {nextSeq, failedSeqs, drainMs}
// → result. Expected per stream: every s below nextSeq whose publish did not fail.
// In catch-up mode it also sends → caughtup once the preloaded events have all arrived.
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import { connect, consumerOpts, type NatsConnection } from 'nats';
import { SseConnection } from '../lib/sse-client.ts';
import { fromParent, runWorker, toParent, workerArgs } from '../lib/proc.ts';
import { monoMs, Recorder, summarize } from '../lib/stats.ts';
import { mercureSubscribePath, natsSubject, REDIS_PORT, redisKey } from '../lib/targets.ts';

export interface SubscriberArgs {
  kind: 'sse' | 'nats' | 'redis';
  /** sse: server port. */
  port?: number;
  /** sse: subscribe on the Mercure hub (one exact topic per subscriber) instead of the native route. */
  mercure?: boolean;
  /** One entry per subscriber: the stream it reads. */
  streams: string[];
  /** sse: where to start (default latest). */
  from?: 'latest' | 'earliest';
  /** sse: connections opened at once while connecting. */
  connectBatch?: number;
  /** catch-up: events s=0..catchupCount-1 are preloaded and must arrive first, in order. */
  catchupCount?: number;
  /** Sequence numbers must arrive strictly increasing by one (a single sequential publisher). */
  strictOrder?: boolean;
  label: string;
}

export interface SubscriberResult {
  subscribers: number;
  connectFailed: number;
  firstConnectError?: string;
  connectSec: number;
  received: number;
  expected: number;
  /** Subscribers that got every expected event of their stream exactly once. */
  complete: number;
  missing: number;
  duplicates: number;
  firstDuplicate?: string;
  /** Deliveries of events whose publish failed or timed out (they may have committed): not counted. */
  ambiguous: number;
  /** Streams on which two subscribers saw a different order. */
  orderMismatches: number;
  strictOrderViolations: number;
  firstViolation?: string;
  reconnects: number;
  closes: number;
  firstClose?: string;
  latency: ReturnType<Recorder['summary']>;
  /** Largest time between two consecutive events received by one subscriber (ms). */
  maxGapMs: number;
  heldMarkers: number;
  catchup?: { events: number; sec: number; perSec: number };
  drainSec: number;
  /** This process's own event-loop delay while receiving: how much of the latency is the client's. */
  loopDelayP99Ms: number;
  loopDelayMaxMs: number;
}

/** A server that never primes an id at connect counts as subscribed after this long. */
const PRIME_FALLBACK_MS = 30_000;

class Sub {
  received = 0;
  dups = 0;
  seen = new Uint8Array(1024);
  hash = 0;
  lastS = -1;
  lastRecv = 0;
  maxGap = 0;
  held = 0;
  /** Wanted events received (counted once 'expect' has arrived). */
  got = 0;
  lastId: string | undefined;
  conn: SseConnection | undefined;
  ready = false;
  constructor(readonly stream: string) {}
}

runWorker(async () => {
  const a = workerArgs<SubscriberArgs>();
  const subs = a.streams.map((s) => new Sub(s));
  const lat = new Recorder();
  let received = 0;
  // Sequence jumps seen by strict-order readers, judged at the end against the failed publishes.
  const jumps: [number, number, string][] = [];
  // After 'expect': per stream, 1 for each sequence number that must arrive.
  let wanted: Record<string, Uint8Array> | undefined;
  let firstDuplicate: string | undefined;
  let reconnects = 0;
  let closes = 0;
  let firstClose: string | undefined;
  let finished = false;
  let caughtUpAt = 0;
  let firstEventAt = 0;
  const catchupCount = a.catchupCount ?? 0;

  const onData = (sub: Sub, data: string, id?: string) => {
    const now = monoMs();
    let o: { t?: number; s?: number; held?: boolean; data?: unknown };
    try {
      o = JSON.parse(data);
    } catch {
      return;
    }
    if (o && o.s === undefined && o.held === undefined && typeof o.data === 'object' && o.data !== null)
      o = o.data as typeof o;
    if (o.held) {
      sub.held++;
      return;
    }
    if (typeof o.s !== 'number') return;
    received++;
    if (firstEventAt === 0) firstEventAt = now;
    const s = o.s;
    if (s >= sub.seen.length) {
      const next = new Uint8Array(Math.max(sub.seen.length * 2, s + 1));
      next.set(sub.seen);
      sub.seen = next;
    }
    const dup = sub.seen[s] === 1;
    if (dup) {
      sub.dups++;
      firstDuplicate ??= `stream ${sub.stream}: s=${s} again (id ${id ?? '?'}, after s=${sub.lastS})`;
    } else {
      sub.seen[s] = 1;
      sub.received++;
    }
    sub.hash = (Math.imul(sub.hash, 31) + s + 1) | 0;
    if (a.strictOrder && s !== sub.lastS + 1 && jumps.length < 10_000) jumps.push([sub.lastS, s, sub.stream]);
    const wv = wanted?.[sub.stream];
    if (wv && s < wv.length && wv[s] === 1 && !dup) sub.got++;
    sub.lastS = s;
    if (sub.lastRecv > 0) sub.maxGap = Math.max(sub.maxGap, now - sub.lastRecv);
    sub.lastRecv = now;
    if (typeof o.t === 'number') lat.add(now - o.t);
    if (catchupCount > 0 && caughtUpAt === 0 && s === catchupCount - 1) {
      caughtUpAt = now;
      toParent({ type: 'caughtup' });
    }
  };

  // ---- connect
  const t0 = monoMs();
  const loop = monitorEventLoopDelay({ resolution: 5 });
  let failed = 0;
  let firstConnectError: string | undefined;
  // SSE: connect → primed id frame, per subscriber (ms).
  const primeMs: number[] = [];
  let closeAll: () => Promise<void> = async () => {};

  if (a.kind === 'sse') {
    const port = a.port!;
    const from = a.from ?? 'latest';
    const open = (sub: Sub, onReady: (ok: boolean, why?: string) => void) => {
      // The hub starts a subscription without Last-Event-ID at the live end (no `from`).
      const path = a.mercure
        ? mercureSubscribePath(sub.stream)
        : `/v1/streams/${encodeURIComponent(sub.stream)}/events${sub.lastId === undefined ? `?from=${from}` : ''}`;
      let settled = false;
      let fallback: NodeJS.Timeout | undefined;
      const openedAt = monoMs();
      const settle = (ok: boolean, why?: string) => {
        if (settled) return;
        settled = true;
        clearTimeout(fallback);
        onReady(ok, why);
      };
      sub.conn = new SseConnection(
        { host: '127.0.0.1', port, path, lastEventId: sub.lastId },
        {
          onOpen: () => {
            // A server that does not prime an id at connect: count it subscribed a moment later.
            fallback = setTimeout(() => settle(true), PRIME_FALLBACK_MS);
          },
          onPrimed: (id) => {
            sub.lastId = id;
            if (!settled) primeMs.push(monoMs() - openedAt);
            settle(true);
          },
          onEvent: (id, _type, data) => {
            if (id !== undefined) sub.lastId = id;
            settle(true);
            onData(sub, data, id);
          },
          onClose: (why) => {
            clearTimeout(fallback);
            if (!settled) return settle(false, why);
            if (finished) return;
            closes++;
            firstClose ??= why;
            // Resume like a real client would, from the last id received.
            reconnects++;
            setTimeout(() => open(sub, () => {}), 100);
          },
        },
      );
    };
    const batch = a.connectBatch ?? 200;
    let next = 0;
    let lastProgress = monoMs();
    await new Promise<void>((resolve) => {
      let pending = 0;
      let done = 0;
      const pump = () => {
        while (pending < batch && next < subs.length) {
          const sub = subs[next++];
          pending++;
          open(sub, (ok, why) => {
            pending--;
            done++;
            sub.ready = ok;
            if (!ok) {
              failed++;
              firstConnectError ??= why;
            }
            if (monoMs() - lastProgress > 2000) {
              lastProgress = monoMs();
              process.stderr.write(`  ${a.label}: ${done}/${subs.length} subscribers connected\n`);
            }
            if (done === subs.length) resolve();
            else pump();
          });
        }
      };
      pump();
    });
    closeAll = async () => {
      for (const s of subs) s.conn?.close();
    };
  } else if (a.kind === 'nats') {
    const nc: NatsConnection = await connect({ servers: '127.0.0.1:4222' });
    const js = nc.jetstream();
    const dec = new TextDecoder();
    for (const sub of subs) {
      const opts = consumerOpts();
      opts.orderedConsumer();
      opts.deliverNew();
      opts.callback((err, m) => {
        if (err) {
          closes++;
          firstClose ??= err.message;
          return;
        }
        if (m) onData(sub, dec.decode(m.data));
      });
      try {
        await js.subscribe(natsSubject(sub.stream), opts);
        sub.ready = true;
      } catch (err) {
        failed++;
        firstConnectError ??= (err as Error).message;
      }
    }
    closeAll = async () => {
      await nc.close();
    };
  } else {
    const clients: Redis[] = [];
    const loops: Promise<void>[] = [];
    await Promise.all(
      subs.map(async (sub) => {
        const c = new Redis({
          host: '127.0.0.1',
          port: REDIS_PORT,
          lazyConnect: true,
          maxRetriesPerRequest: 0,
        });
        c.on('error', () => {});
        clients.push(c);
        try {
          await c.connect();
          const key = redisKey(sub.stream);
          const last = await c.xrevrange(key, '+', '-', 'COUNT', 1);
          let cursor = last.length > 0 ? last[0][0] : '0-0';
          sub.ready = true;
          loops.push(
            (async () => {
              while (!finished) {
                let r: [string, [string, string[]][]][] | null;
                try {
                  r = (await c.xread('COUNT', 1000, 'BLOCK', 1000, 'STREAMS', key, cursor)) as typeof r;
                } catch (err) {
                  if (!finished) {
                    closes++;
                    firstClose ??= (err as Error).message;
                  }
                  return;
                }
                if (!r) continue;
                for (const [, entries] of r)
                  for (const [id, fields] of entries) {
                    cursor = id;
                    onData(sub, fields[1], id);
                  }
              }
            })(),
          );
        } catch (err) {
          failed++;
          firstConnectError ??= (err as Error).message;
        }
      }),
    );
    closeAll = async () => {
      for (const c of clients) c.disconnect();
      await Promise.allSettled(loops);
    };
  }
  const connectSec = (monoMs() - t0) / 1000;
  loop.enable();
  const primed = summarize(primeMs);
  toParent({
    type: 'ready',
    connected: subs.length - failed,
    failed,
    firstConnectError,
    connectSec,
    primed: primed.count,
    primeP50Ms: primed.p50,
    primeMaxMs: primed.max,
  });

  const progress = setInterval(() => {
    process.stderr.write(`  ${a.label}: ${received} events received\n`);
  }, 5000);

  // ---- wait for the publisher's numbers, then for every subscriber to have every wanted event
  const expect = await fromParent('expect');
  const nextSeq = expect['nextSeq'] as Record<string, number>;
  const failedSeqs = (expect['failedSeqs'] ?? {}) as Record<string, number[]>;
  const drainMs = Number(expect['drainMs'] ?? 5000);
  const w: Record<string, Uint8Array> = {};
  const wantCount: Record<string, number> = {};
  for (const [stream, n] of Object.entries(nextSeq)) {
    const arr = new Uint8Array(n).fill(1);
    for (const f of failedSeqs[stream] ?? []) if (f < n) arr[f] = 0;
    w[stream] = arr;
    wantCount[stream] = n - (failedSeqs[stream]?.length ?? 0);
  }
  for (const sub of subs) {
    const arr = w[sub.stream] ?? new Uint8Array(0);
    let got = 0;
    for (let i = 0; i < Math.min(arr.length, sub.seen.length); i++) got += arr[i] & sub.seen[i];
    sub.got = got;
  }
  wanted = w;
  const tDrain = monoMs();
  const allIn = () => subs.every((s) => !s.ready || s.got >= (wantCount[s.stream] ?? 0));
  while (!allIn() && monoMs() - tDrain < drainMs) await new Promise((r) => setTimeout(r, 20));
  const drainSec = (monoMs() - tDrain) / 1000;
  finished = true;
  clearInterval(progress);
  await closeAll();

  // ---- verdict
  let expected = 0;
  let complete = 0;
  let missing = 0;
  let duplicates = 0;
  let maxGap = 0;
  let heldMarkers = 0;
  let ambiguous = 0;
  const hashes = new Map<string, Set<number>>();
  for (const sub of subs) {
    const n = wantCount[sub.stream] ?? 0;
    expected += n;
    const miss = n - sub.got;
    missing += miss;
    duplicates += sub.dups;
    for (const f of failedSeqs[sub.stream] ?? []) if (sub.seen[f]) ambiguous++;
    if (miss === 0 && sub.dups === 0) complete++;
    maxGap = Math.max(maxGap, sub.maxGap);
    heldMarkers += sub.held;
    let set = hashes.get(sub.stream);
    if (!set) {
      set = new Set();
      hashes.set(sub.stream, set);
    }
    set.add(sub.hash);
  }
  // A jump over sequence numbers is a violation unless every skipped one failed to publish.
  let strictViolations = 0;
  let firstViolation: string | undefined;
  for (const [from, to, stream] of jumps) {
    const arr = w[stream];
    let bad = to <= from;
    for (let k = from + 1; !bad && k < to; k++) bad = arr !== undefined && k < arr.length && arr[k] === 1;
    if (bad) {
      strictViolations++;
      firstViolation ??= `stream ${stream}: got s=${to} right after s=${from}`;
    }
  }
  let orderMismatches = 0;
  for (const set of hashes.values()) if (set.size > 1) orderMismatches++;
  const result: SubscriberResult = {
    subscribers: subs.length,
    connectFailed: failed,
    firstConnectError,
    connectSec,
    received,
    expected,
    complete,
    missing,
    duplicates,
    firstDuplicate,
    ambiguous,
    orderMismatches,
    strictOrderViolations: strictViolations,
    firstViolation,
    reconnects,
    closes,
    firstClose,
    latency: lat.summary(),
    maxGapMs: maxGap,
    heldMarkers,
    drainSec,
    loopDelayP99Ms: loop.percentile(99) / 1e6,
    loopDelayMaxMs: loop.max / 1e6,
  };
  if (catchupCount > 0) {
    const sec = caughtUpAt > 0 ? (caughtUpAt - t0) / 1000 : Number.NaN;
    result.catchup = { events: catchupCount, sec, perSec: catchupCount / sec };
  }
  return result;
});
