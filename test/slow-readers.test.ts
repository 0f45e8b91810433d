// Readers that never read cost bounded memory (src/feed/slow-readers.ts, docs/operations.md#slow-readers):
// 2,000 SSE subscribers that connect, send their request and never read, on four streams while
// events are published. The service's RSS growth plus those sockets' kernel send queues (read from
// /proc/net/tcp) stay under the documented bound; a socket over SSE_MAX_IN_FLIGHT_BYTES is gone
// within two sweeps; every stalled one is dropped with a reset (no socket lingers with its queue);
// readers on the same streams get every event in order, with a sane latency; and a dropped reader
// resumes with Last-Event-ID losing nothing.
//
// The stalled clients are raw sockets, paused: Node cannot set SO_RCVBUF, but a socket that never
// reads keeps the receive buffer it started with (tcp_rmem's default; the kernel grows it only for
// a reader), so each holds ~128 KiB on the client's side, which is not the service's cost.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import t from 'tap';
import { isPrimer, parseSse, type SseMessage, textChunks } from '../src/client/sse.ts';
import { openSse, publish, startTestServer, testDatabase, until } from './helpers.ts';

const KiB = 1024;
const MiB = 1024 * KiB;
const STREAMS = ['slow-a', 'slow-b', 'slow-c', 'slow-d'];
const LIMITS = {
  slowSubscriberMaxMs: 4000, // sweeps every second
  sseMaxInFlightBytes: 256 * KiB,
  sseMaxTotalInFlightBytes: 32 * MiB,
};
const SWEEP_MS = 1000;
/** Per connection, what the service keeps for an open SSE stream whatever it is sent (capacity.md's
 * ~18 KiB), with this process's client side of it (a raw socket) on top. */
const PER_CONNECTION = 48 * KiB;
/** The documented bound beyond connection state: the total cap, plus what the fan-out can write in
 * the time a sweep takes to come (an early sweep every 25 ms at most, the table read) on a loaded
 * machine, plus heap garbage not yet collected — the most of it: in a CI run beside two other test
 * runs the heap grew by 178 MiB before a collection (RSS growth 186 MiB, kernel queues 16 MiB).
 * Without the bound the same load costs over 1.2 GiB (bench/RESULTS.md, "Slow readers"). */
const SLACK = 128 * MiB;

/** Open file descriptors allowed (`ulimit -n`): each stalled reader takes two here (both ends). */
function fdLimit(): number {
  try {
    return Number(execFileSync('sh', ['-c', 'ulimit -n'], { encoding: 'utf8' }).trim()) || 1024;
  } catch {
    return 1024;
  }
}

/** The server's sockets in the kernel table: by client port, their state and send queue. Fixed
 * offsets from each line's first colon (the kernel pads every field; see src/feed/send-queues.ts):
 * splitting 15,000 lines every sample would starve the event loop the test measures. */
function serverSockets(port: number): Map<number, { state: string; queued: number }> {
  const local = port.toString(16).toUpperCase().padStart(4, '0');
  const out = new Map<number, { state: string; queued: number }>();
  const table = readFileSync('/proc/net/tcp', 'latin1');
  let pos = table.indexOf('\n') + 1;
  while (pos > 0 && pos < table.length) {
    const c = table.indexOf(':', pos);
    // sl: LLLLLLLL:PPPP RRRRRRRR:PPPP ST TTTTTTTT:...
    if (table.slice(c + 11, c + 15) === local && table.slice(c + 30, c + 32) !== '0A') {
      out.set(Number.parseInt(table.slice(c + 25, c + 29), 16), {
        state: table.slice(c + 30, c + 32),
        queued: Number.parseInt(table.slice(c + 33, c + 41), 16),
      });
    }
    pos = table.indexOf('\n', c) + 1;
  }
  return out;
}

/** A stalled reader: connects, asks for the stream, never reads. */
function stalledReader(port: number, stream: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    sock.pause();
    sock.on('error', () => {}); // the reset, if it is ever read
    sock.once('connect', () => {
      sock.write(`GET /v1/streams/${stream}/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n`);
      resolve(sock);
    });
    sock.once('error', reject);
  });
}

/** `until`, its failure saying how far it got. */
const waitFor = (cond: () => boolean, ms: number, what: () => string) =>
  until(cond, ms, 'it').catch((err: Error) => {
    throw new Error(`${err.message}: ${what()}`);
  });

/** A reader that keeps up, stamping each event when it arrives. */
async function timedReader(url: string) {
  const abort = new AbortController();
  const res = await fetch(url, { headers: { accept: 'text/event-stream' }, signal: abort.signal });
  const got: { m: SseMessage; at: number }[] = [];
  void (async () => {
    try {
      for await (const m of parseSse(textChunks(res.body!))) {
        if (!isPrimer(m) && m.data !== undefined) got.push({ m, at: Date.now() });
      }
    } catch {}
  })();
  return { got, close: () => abort.abort() };
}

t.test(
  '2,000 readers that never read: bounded RSS plus kernel queues, dropped in time, readers unharmed',
  { skip: process.platform !== 'linux' && 'kernel queues are read from /proc/net/tcp' },
  async (t) => {
    const limit = fdLimit();
    const n = Math.min(2000, Math.floor((limit - 400) / 2));
    if (n < 2000) t.comment(`ulimit -n is ${limit}: ${n} stalled readers instead of 2,000`);
    const dbUrl = await testDatabase(t);
    const server = await startTestServer(t, dbUrl, LIMITS);
    const port = Number(new URL(server.url).port);
    const hub = server.feed.hub;

    const readers = await Promise.all(
      STREAMS.flatMap((s) => [0, 1].map(() => timedReader(`${server.url}/v1/streams/${s}/events`))),
    );
    t.teardown(() => {
      for (const r of readers) r.close();
    });
    // Three stalled readers through http.get, whose prefix is parsed after the drop (see the end).
    const witnesses = await Promise.all(
      STREAMS.slice(0, 3).map(
        (s) =>
          new Promise<http.IncomingMessage>((resolve, reject) => {
            const req = http.get(
              `${server.url}/v1/streams/${s}/events`,
              { agent: false, headers: { accept: 'text/event-stream' } },
              resolve,
            );
            req.on('error', reject);
            t.teardown(() => req.destroy());
          }),
      ),
    );
    for (const w of witnesses) {
      w.pause();
      w.setEncoding('utf8');
    }
    await until(() => hub.subscriberCount === readers.length + witnesses.length, 10000, 'readers in');
    global.gc?.();
    const baseRss = process.memoryUsage.rss();

    const stalled: net.Socket[] = [];
    t.teardown(() => {
      for (const s of stalled) s.destroy();
    });
    for (let i = 0; i < n; i += 100) {
      const batch = Array.from({ length: Math.min(100, n - i) }, (_, j) =>
        stalledReader(port, STREAMS[(i + j) % STREAMS.length]!),
      );
      stalled.push(...(await Promise.all(batch)));
    }
    // The server side's remote port of each stalled socket (the readers' own are left out below).
    const stalledPorts = new Set(stalled.map((s) => s.localPort!));
    const everyone = readers.length + witnesses.length + n;
    await until(() => hub.subscriberCount === everyone, 20000, `${n} stalled readers subscribed`);
    const connectedRss = process.memoryUsage.rss();

    // Sample RSS and the kernel's queues, and when each stalled socket first went over the cap.
    let peak = { rss: 0, queued: 0, sum: 0, sockets: 0, heap: 0, external: 0 };
    const overSince = new Map<number, number>();
    const lastSeen = new Map<number, number>();
    const sample = () => {
      const now = Date.now();
      const rss = process.memoryUsage.rss() - baseRss;
      let queued = 0;
      const sockets = serverSockets(port);
      for (const [p, s] of sockets) {
        queued += s.queued;
        lastSeen.set(p, now);
        if (s.queued > LIMITS.sseMaxInFlightBytes && stalledPorts.has(p) && !overSince.has(p))
          overSince.set(p, now);
      }
      if (rss + queued > peak.sum) {
        const m = process.memoryUsage();
        peak = {
          rss,
          queued,
          sum: rss + queued,
          sockets: sockets.size,
          heap: m.heapUsed,
          external: m.external,
        };
      }
    };
    // Every 250 ms: a read of the kernel's table costs tens of ms with 4,000 sockets on a loaded machine.
    const sampler = setInterval(sample, 250);
    t.teardown(() => clearInterval(sampler));

    // 4 KiB events in batches of 20 to each stream: 2.5 MiB a stream, more than a stalled
    // socket's kernel buffer can take (up to 4 MiB on loopback, autotuned).
    const published = new Map<string, { id: string; at: number }[]>(STREAMS.map((s) => [s, []]));
    const data = 'x'.repeat(4 * KiB);
    const started = Date.now();
    for (let round = 0; round < 32; round++) {
      await Promise.all(
        STREAMS.map(async (s) => {
          const r = await publish(
            server.url,
            s,
            Array.from({ length: 20 }, (_, i) => ({ data: { round, i, data } })),
          );
          if (r.status !== 201) throw new Error(`publish answered ${r.status}`);
          const at = Date.now();
          for (const e of r.body.events!) published.get(s)!.push({ id: e.id, at });
        }),
      );
    }
    const publishedAt = Date.now();
    await waitFor(
      () => hub.subscriberCount === readers.length,
      LIMITS.slowSubscriberMaxMs + 2 * SWEEP_MS + 5000,
      () => `every stalled reader dropped (${hub.subscriberCount - readers.length} left)`,
    );
    const allDroppedAt = Date.now();
    sample();
    clearInterval(sampler);
    const { dropped, inFlight } = hub.slow.stats;
    t.comment(
      `${n} stalled readers: published ${Math.round((publishedAt - started) / 100) / 10} s, all dropped ` +
        `${allDroppedAt - publishedAt} ms after; drops ${JSON.stringify(dropped)}; connections took ` +
        `${((connectedRss - baseRss) / MiB).toFixed(1)} MiB of RSS; peak RSS growth ` +
        `${(peak.rss / MiB).toFixed(1)} MiB (heap ${(peak.heap / MiB).toFixed(1)}, external ` +
        `${(peak.external / MiB).toFixed(1)}) + kernel queues ${(peak.queued / MiB).toFixed(1)} MiB ` +
        `(${peak.sockets} sockets); ${hub.slow.stats.sweeps} sweeps, ` +
        `${(hub.slow.stats.sweepSeconds * 1000).toFixed(0)} ms in them`,
    );

    const bound = LIMITS.sseMaxTotalInFlightBytes + n * PER_CONNECTION + SLACK;
    t.ok(
      peak.sum <= bound,
      `RSS growth + kernel send queues peaked at ${(peak.sum / MiB).toFixed(1)} MiB, bound ${(bound / MiB).toFixed(1)} MiB`,
    );
    t.equal(
      dropped.timeout + dropped.in_flight + dropped.total,
      n + witnesses.length,
      'every stalled reader was dropped by a rule',
    );
    t.equal(hub.stats.dropped, n + witnesses.length);
    // Size: over the cap at a sample, gone within two sweeps (one to measure its progress) and a
    // loaded machine's slack.
    let late = 0;
    for (const [p, since] of overSince) if ((lastSeen.get(p) ?? since) - since > 2 * SWEEP_MS + 1500) late++;
    t.equal(
      late,
      0,
      `every socket over SSE_MAX_IN_FLIGHT_BYTES went within two sweeps (${overSince.size} were over)`,
    );
    // The reset: no server socket is left holding a queue (a FIN would leave each in FIN_WAIT1 with it).
    const left = [...serverSockets(port).keys()].filter((p) => stalledPorts.has(p));
    t.same(left, [], `no socket of a dropped reader is left in the kernel's table (FIN_WAIT1 or other)`);
    // What is left in flight is the readers' that keep up: it drains once the publishes are read. The
    // sweep that dropped the last stalled reader may have measured them still behind (a loaded machine:
    // their latency below was seconds in CI once, 1.7 MB at that sweep), so a later sweep decides.
    // A dropped reader's bytes still counted would never leave.
    await waitFor(
      () => hub.slow.stats.inFlight < 64 * KiB,
      2 * SWEEP_MS + 10_000,
      () =>
        `bytes in flight under 64 KiB at a sweep (${hub.slow.stats.inFlight}; ${inFlight} when the last was dropped)`,
    );
    t.pass(`bytes in flight at a sweep after the drops: ${hub.slow.stats.inFlight}`);

    // The readers that keep up: every event of their stream, in order; latency sane (not a bound
    // on it: the machine is shared).
    const latencies: number[] = [];
    for (const [k, r] of readers.entries()) {
      const mine = published.get(STREAMS[Math.floor(k / 2)]!)!;
      await waitFor(
        () => r.got.length >= mine.length,
        15000,
        () => `reader ${k}: ${r.got.length}/${mine.length}`,
      );
      t.same(
        r.got.map((g) => g.m.id),
        mine.map((p) => p.id),
        `reader ${k} got all ${mine.length} events of its stream, in order, once`,
      );
      for (const [i, g] of r.got.entries()) latencies.push(g.at - mine[i]!.at);
    }
    latencies.sort((a, b) => a - b);
    const p50 = latencies[Math.floor(latencies.length / 2)]!;
    const p99 = latencies[Math.floor(latencies.length * 0.99)]!;
    t.comment(`readers' latency after the publish was answered: p50 ${p50} ms, p99 ${p99} ms`);
    // Not a latency bound (the machine is shared): readers wait at most about as long as the stalled
    // ones take to be dropped, never for the timeout of each in turn.
    const sane = LIMITS.slowSubscriberMaxMs + 2 * SWEEP_MS + 4000;
    t.ok(p99 < sane, `latency did not collapse (p50 ${p50} ms, p99 ${p99} ms; sanity bound ${sane} ms)`);

    // A dropped reader resumes with the last id it received and gets the rest, exactly once.
    for (const [k, w] of witnesses.entries()) {
      const mine = published.get(STREAMS[k]!)!.map((p) => p.id);
      async function* chunks() {
        try {
          for await (const c of w) yield c as string;
        } catch {} // the reset: what arrived before it still counts
      }
      let last: string | undefined;
      const got: string[] = [];
      for await (const m of parseSse(chunks())) {
        if (isPrimer(m)) last ??= m.id;
        else if (m.data !== undefined) got.push(m.id!);
      }
      t.same(got, mine.slice(0, got.length), `witness ${k}: a prefix (${got.length}) in order`);
      last = got.at(-1) ?? last;
      const resumed = await openSse(t, `${server.url}/v1/streams/${STREAMS[k]}/events`, {
        'last-event-id': last!,
      });
      const rest = await resumed.waitFor(mine.length - got.length, 15000);
      t.same(
        rest.map((m) => m.id),
        mine.slice(got.length),
        `witness ${k}: the rest after resuming`,
      );
      resumed.close();
    }
  },
);
