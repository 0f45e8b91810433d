// Where one event's time goes inside commitfeed, stage by stage, for the bench's latency runs
// (scenario 3). A preload for the server process, plain JavaScript so it loads before tsx:
//
//   npm run bench -- --scenarios 3 ... --server-env NODE_OPTIONS=--import=$PWD/bench/lib/trace-stages.mjs,TRACE_OUT=/tmp/stages.json
//
// Each event the bench publishes carries {t: CLOCK_MONOTONIC ms at send, s: per-stream sequence};
// this stamps it, on the same clock, as it passes the batcher, the group commit, the tail read and
// the hub, and writes the percentiles of each stage to TRACE_OUT when the process exits (one entry
// per measured run: events of `*-warm` streams are skipped, and a pause of 1.5 s starts a new run).
// It wraps prototypes of the running server's own modules (the same module instances: imported by
// URL once the server has started), so it measures the code as it is, at the cost of a few
// closures per group. Not for production: a measuring tool.
import { writeFileSync } from 'node:fs';
import http from 'node:http';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const out = process.env.TRACE_OUT;
const mono = () => Number(process.hrtime.bigint()) / 1e6;
const STAGES = [
  ['http', 't', 'publish', 'publisher stamp → batcher.publish (HTTP in, parse, checks)'],
  ['queue', 'publish', 'writeStart', 'waiting for a free write'],
  ['commit', 'writeStart', 'committed', 'the grouped append + notify + commit, one round trip'],
  ['respond', 'committed', 'resolved', 'commit → the publish handler resumes (its answer follows)'],
  ['wake', 'committed', 'readStart', 'commit → the tail read starts'],
  ['read', 'readStart', 'readEnd', 'the tail read, one round trip (own events put in from memory)'],
  ['toHub', 'readEnd', 'hubStart', 'read returned → Hub.onEvents'],
  ['fanout', 'hubStart', 'hubEnd', 'fan-out of the page: frames built, written to the sockets'],
  ['server', 't', 'hubEnd', 'publisher stamp → last socket write of its page (server side)'],
];

const runs = [];
let run;
let lastSeen = 0;
const events = new Map();
const awaitingRead = [];
const loop = monitorEventLoopDelay({ resolution: 1 });
loop.enable();
let cpuAtStart;

function keyOf(stream, data) {
  if (typeof stream !== 'string' || !stream.startsWith('s3-lat-') || stream.endsWith('-warm'))
    return undefined;
  const s = /"s":(\d+)/.exec(data);
  const t = /"t":([\d.]+)/.exec(data);
  if (!s || !t) return undefined;
  return { key: `${stream}/${s[1]}`, t: Number(t[1]) };
}

function track(stream, data) {
  const k = keyOf(stream, data);
  if (!k) return undefined;
  // A pause starts a new run (and forgets the last one's events: the next run's sequence numbers
  // start again from 1).
  const now = mono();
  if (!run || now - lastSeen > 1500) newRun();
  lastSeen = now;
  let e = events.get(k.key);
  if (!e) {
    e = { t: k.t };
    events.set(k.key, e);
    run.events.push(e);
  }
  return e;
}

function newRun() {
  if (run) closeRun();
  run = { events: [], startedAt: mono() };
  loop.reset();
  cpuAtStart = process.cpuUsage();
}

function closeRun() {
  const cpu = process.cpuUsage(cpuAtStart);
  const sec = (mono() - run.startedAt) / 1000;
  const pct = (xs, q) => (xs.length ? xs[Math.min(xs.length - 1, Math.floor(q * xs.length))] : Number.NaN);
  const stages = {};
  for (const [name, from, to, what] of STAGES) {
    const xs = run.events
      .filter((e) => e[from] !== undefined && e[to] !== undefined)
      .map((e) => e[to] - e[from])
      .sort((a, b) => a - b);
    stages[name] = { what, count: xs.length, p50: pct(xs, 0.5), p90: pct(xs, 0.9), p99: pct(xs, 0.99) };
  }
  const sharedRead = run.events.filter((e) => e.readWasInFlight).length;
  runs.push({
    events: run.events.length,
    seconds: sec,
    serverCores: (cpu.user + cpu.system) / 1e6 / sec,
    eventLoopDelayMs: { p50: loop.percentile(50) / 1e6, p99: loop.percentile(99) / 1e6, max: loop.max / 1e6 },
    committedWhileReadInFlight: sharedRead / Math.max(1, run.events.length),
    stages,
  });
  for (const e of run.events) for (const k of Object.keys(e)) if (k !== 't') delete e[k];
  events.clear();
  run = undefined;
}

let readsInFlight = 0;

async function patch() {
  const src = (p) => pathToFileURL(join(process.cwd(), 'src', p)).href;
  const { Batcher } = await import(src('commit/batcher.ts'));
  const { FeedReads } = await import(src('feed/reads.ts'));
  const { Hub } = await import(src('feed/hub.ts'));

  const publish = Batcher.prototype.publish;
  Batcher.prototype.publish = function (items) {
    const now = mono();
    const tracked = [];
    for (const i of items) {
      const e = track(i.stream, i.data);
      if (e) {
        e.publish = now;
        tracked.push(e);
      }
    }
    const p = publish.call(this, items);
    if (tracked.length) {
      // Wrap the grouped write once per batcher: stamps the statement's start and its commit.
      if (!this.__traced) {
        this.__traced = true;
        const write = this.opts.write;
        this.opts.write = (db, group) => {
          const start = mono();
          const mine = group.map((i) => events.get(keyOf(i.stream, i.data)?.key)).filter(Boolean);
          for (const e of mine) e.writeStart = start;
          return write(db, group).then((r) => {
            const at = mono();
            for (const e of mine) {
              e.committed = at;
              if (readsInFlight > 0) e.readWasInFlight = true;
              awaitingRead.push(e);
            }
            return r;
          });
        };
      }
      p.then(
        () => {
          const at = mono();
          for (const e of tracked) e.resolved = at;
        },
        () => {},
      );
    }
    return p;
  };

  const tail = FeedReads.prototype.tail;
  FeedReads.prototype.tail = function (woken, read) {
    const start = mono();
    const mine = awaitingRead.splice(0);
    for (const e of mine) e.readStart = start;
    readsInFlight++;
    const p = tail.call(this, woken, read);
    p.then(
      () => {
        readsInFlight--;
        const at = mono();
        for (const e of mine) e.readEnd = at;
      },
      () => readsInFlight--,
    );
    return p;
  };

  const onEvents = Hub.prototype.onEvents;
  Hub.prototype.onEvents = function (page) {
    const start = mono();
    const mine = [];
    for (const fe of page) {
      const k = keyOf(fe.stream, fe.data);
      const e = k && events.get(k.key);
      if (e) {
        e.hubStart = start;
        mine.push(e);
      }
    }
    onEvents.call(this, page);
    const end = mono();
    for (const e of mine) e.hubEnd = end;
  };
  process.stderr.write('trace-stages: batcher, reads and hub wrapped\n');
}

// Patch once the server listens: by then every module of the app is loaded (and tsx registered).
const listen = http.Server.prototype.listen;
let patched = false;
http.Server.prototype.listen = function (...args) {
  if (!patched) {
    patched = true;
    patch().catch((err) => process.stderr.write(`trace-stages: not patched: ${err.stack}\n`));
  }
  return listen.apply(this, args);
};

process.on('exit', () => {
  if (run) closeRun();
  if (out) writeFileSync(out, JSON.stringify(runs, null, 1));
});
