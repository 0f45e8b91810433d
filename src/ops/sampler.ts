/**
 * The live page's sampler: one per process, it takes one sample of the service every second into a
 * bounded in-memory ring (10 minutes by default), and every open live page reads that ring (see
 * live.ts). However many pages are open, the database sees the sampler's reads only: per tick one
 * grouped read of queue depth, one read of how far the tailer is behind (rows past its position,
 * counted up to a bound, and the oldest one's age), and, only while the horizon is
 * stalled, one read of pg_stat_activity for the backend holding it.
 *
 * Counters come from memory: the batcher's, hub's and queues' own counts (differenced per tick, so
 * every rate is per second over the last second, not an average since start), and a watcher on the
 * feed that sees every page the tailer reads (the whole feed, every instance's writes), which gives
 * per-stream rates over a sliding window and the publish → delivery lag of each event (while nobody
 * in the process subscribes, the tailer defers its reads by up to IDLE_READ_DELAY, and the lag with it).
 *
 * Lifecycle: started by the server once the feed runs, stopped by its close(); an unref'd 1 s
 * interval in between. A tick whose database reads fail still records the in-memory counters and
 * leaves the database-backed fields null (a gap in those series); nothing here throws into the
 * process. A tick still waiting for its reads when the next is due is skipped, never stacked.
 */
import { type Kysely, sql } from 'kysely';
import type { Database } from '../db/database.ts';
import { type Cursor, formatCursor } from '../feed/cursor.ts';
import type { FeedEvent } from '../feed/event.ts';
import type { Feed } from '../feed/feed.ts';
import { type QueueStats, queueStats } from '../queues/admin.ts';
import type { Queues } from '../queues/queues.ts';
import { queueStream } from '../queues/wake-stream.ts';
import { listStreams } from '../streams/queries.ts';
import { horizonBlocker } from '../feed/horizon-blocker.ts';

/** One queue at one tick: depth from the tables, activity (per second) from this process. */
export type QueueSample = Pick<QueueStats, 'name' | 'paused' | 'ready' | 'delayed' | 'leased' | 'dead'> & {
  /** Seconds the oldest claimable job has waited. */
  oldestReadyS: number;
  enqueued: number;
  claimed: number;
  acked: number;
  deadLettered: number;
};

export interface Sample {
  /** Epoch ms of the tick. */
  t: number;
  /** Per second over the last tick: publish requests, events written, commits (this process). */
  publishes: number;
  eventsWritten: number;
  commits: number;
  /** Events per commit during the tick (null: no commit). */
  batch: number | null;
  /** Events of the whole feed read by the tailer, per second. */
  eventsRead: number;
  /** Publish → delivery (commit-time row creation to the tailer handing it to subscribers), ms. */
  lagP50Ms: number | null;
  lagP99Ms: number | null;
  lagMaxMs: number | null;
  sseConnections: number;
  /** SSE event frames written per second. */
  frames: number;
  sseBufferedBytes: number;
  /** Slow subscribers dropped per second. */
  slowDropped: number;
  /** The tailer's position (a cursor): every finished event up to it has been read. */
  position: string;
  /** Feed rows past the position (not yet delivered, or waiting behind the horizon), counted up to
   * BEHIND_CAP; null: the read failed. */
  behindRows: number | null;
  /** More than BEHIND_CAP rows are past the position. */
  behindMore: boolean;
  /** Age of the oldest row past the position, s (0 when caught up). */
  behindAgeS: number | null;
  /** How long committed rows have waited behind the horizon, s. */
  stallS: number;
  blocker: { pid: number; applicationName: string; ageS: number } | null;
  /** Null when the depth read failed. */
  queues: QueueSample[] | null;
}

/** A user stream as the streams view shows it (internal `queue/...` streams are not kept). */
export interface StreamRow {
  name: string;
  /** Events per second over the last `RATE_WINDOW_S` seconds. */
  perS: number;
  lastMinute: number;
  /** Epoch ms of the last event seen (null: none since start and none found at start). */
  lastAt: number | null;
  types: string[];
}

export const RATE_WINDOW_S = 10;
/** Rows past the tailer counted per tick at most: a bounded index walk, not a count of the feed. */
export const BEHIND_CAP = 10_000;
const MINUTE = 60;
const MAX_LAG_SAMPLES = 4096;
const MAX_TYPES = 32;
const MAX_STREAMS = 5000;

interface StreamRec {
  name: string;
  /** Events per tick, slot = tick % 60; slots of ticks after `lastTick` are stale (read as 0). */
  slots: Uint32Array;
  lastTick: number;
  lastAt: number | null;
  types: Set<string>;
}

export interface SamplerOptions {
  db: Kysely<Database>;
  feed: Feed;
  queues: Queues;
  intervalMs?: number;
  /** Samples kept (default: 10 minutes of 1 s ticks). */
  capacity?: number;
}

export class Sampler {
  private readonly ring: Sample[] = [];
  private readonly streams = new Map<string, StreamRec>();
  private readonly listeners = new Set<(s: Sample) => void>();
  private tick = 0;
  private timer: NodeJS.Timeout | undefined;
  private unwatch: (() => void) | undefined;
  private busy = false;
  private lags: number[] = [];
  private lagSeen = 0;
  private eventsRead = 0;
  private prev = { requests: 0, events: 0, statements: 0, frames: 0, dropped: 0, at: 0 };
  private prevQueues = new Map<string, { enqueued: number; claimed: number; acked: number; dead: number }>();
  readonly intervalMs: number;
  readonly capacity: number;
  /** Database statements the sampler issued, and ticks taken: the whole cost of every live page. */
  readonly stats = { queries: 0, ticks: 0, failedTicks: 0, skippedTicks: 0 };

  constructor(private readonly opts: SamplerOptions) {
    this.intervalMs = opts.intervalMs ?? 1000;
    this.capacity = opts.capacity ?? Math.round(600_000 / this.intervalMs);
  }

  async start(): Promise<void> {
    this.prev = this.counters(Date.now());
    for (const [q, c] of this.opts.queues.counters.byQueue) this.prevQueues.set(q, queueTotals(c));
    this.unwatch = this.opts.feed.watch((events) => this.onEvents(events));
    // Streams that were written before this process started, with their last event time; rates then
    // come from what the tailer reads. A failed read only leaves them out until they see an event.
    try {
      this.stats.queries++;
      const { streams } = await listStreams(this.opts.db, { limit: 1000, window: 1000 });
      for (const s of streams) {
        if (isInternal(s.name)) continue;
        const rec = this.rec(s.name);
        if (rec && s.lastEventAt) rec.lastAt = Math.max(rec.lastAt ?? 0, Date.parse(s.lastEventAt));
        for (const t of s.types) if (rec && rec.types.size < MAX_TYPES) rec.types.add(t);
      }
    } catch {
      // the streams view fills in as events arrive
    }
    this.timer = setInterval(() => void this.sample(), this.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    this.unwatch?.();
    this.unwatch = undefined;
    this.listeners.clear();
  }

  /** The ring, oldest first. */
  history(): readonly Sample[] {
    return this.ring;
  }

  /** Calls `fn` with each new sample; returns the unsubscribe. */
  subscribe(fn: (s: Sample) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** User streams by recent activity (busiest first, then most recent). */
  streamRows(): StreamRow[] {
    const rows: StreamRow[] = [];
    for (const r of this.streams.values()) {
      rows.push({
        name: r.name,
        perS: this.sum(r, RATE_WINDOW_S) / ((RATE_WINDOW_S * this.intervalMs) / 1000),
        lastMinute: this.sum(r, MINUTE),
        lastAt: r.lastAt,
        types: [...r.types],
      });
    }
    return rows.sort((a, b) => b.perS - a.perS || (b.lastAt ?? 0) - (a.lastAt ?? 0) || cmp(a.name, b.name));
  }

  private onEvents(events: readonly FeedEvent[]): void {
    const now = Date.now();
    this.eventsRead += events.length;
    for (const e of events) {
      // Every event costs a map lookup; lags are kept up to a bound, then sampled evenly.
      this.lagSeen++;
      const lag = now - e.ms;
      if (this.lags.length < MAX_LAG_SAMPLES) this.lags.push(lag);
      else {
        const i = Math.floor(Math.random() * this.lagSeen);
        if (i < MAX_LAG_SAMPLES) this.lags[i] = lag;
      }
      if (isInternal(e.stream)) continue;
      const rec = this.rec(e.stream);
      if (!rec) continue;
      this.bump(rec);
      rec.lastAt = e.ms;
      if (e.type !== null && rec.types.size < MAX_TYPES) rec.types.add(e.type);
    }
  }

  private rec(name: string): StreamRec | undefined {
    let r = this.streams.get(name);
    if (!r) {
      if (this.streams.size >= MAX_STREAMS) return undefined;
      r = { name, slots: new Uint32Array(MINUTE), lastTick: this.tick, lastAt: null, types: new Set() };
      this.streams.set(name, r);
    }
    return r;
  }

  /** Counts one event in the current tick's slot, clearing slots left stale since the last one. */
  private bump(r: StreamRec): void {
    if (r.lastTick !== this.tick) {
      for (let k = r.lastTick + 1; k <= this.tick && k <= r.lastTick + MINUTE; k++) r.slots[k % MINUTE] = 0;
      r.lastTick = this.tick;
    }
    r.slots[this.tick % MINUTE]++;
  }

  /** Events in the last `n` completed ticks (the current, still-filling tick excluded). */
  private sum(r: StreamRec, n: number): number {
    let total = 0;
    for (let k = this.tick - n; k < this.tick; k++) {
      if (k < 0 || k > r.lastTick || k <= r.lastTick - MINUTE) continue;
      total += r.slots[k % MINUTE];
    }
    return total;
  }

  /** One tick: in-memory counters now, database reads in parallel, then publish the sample. */
  async sample(): Promise<Sample | undefined> {
    if (this.busy) {
      this.stats.skippedTicks++;
      return undefined;
    }
    this.busy = true;
    try {
      const { feed, queues, db } = this.opts;
      const now = Date.now();
      const perS = 1000 / Math.max(1, now - this.prev.at);
      const b = feed.batcher.stats;
      const h = feed.hub.stats;
      const commits = b.statements - this.prev.statements;
      const written = b.events - this.prev.events;
      const lags = this.lags.sort((x, y) => x - y);
      const position = feed.tailer.position;
      const stallMs = feed.tailer.horizonStallMs;
      const sample: Sample = {
        t: now,
        publishes: (b.requests - this.prev.requests) * perS,
        eventsWritten: written * perS,
        commits: commits * perS,
        batch: commits === 0 ? null : written / commits,
        eventsRead: this.eventsRead * perS,
        lagP50Ms: lags.length === 0 ? null : quantile(lags, 0.5),
        lagP99Ms: lags.length === 0 ? null : quantile(lags, 0.99),
        lagMaxMs: lags.length === 0 ? null : lags[lags.length - 1],
        sseConnections: feed.hub.subscriberCount,
        frames: (h.frames - this.prev.frames) * perS,
        sseBufferedBytes: feed.hub.bufferedBytes(),
        slowDropped: (h.dropped - this.prev.dropped) * perS,
        position: formatCursor(position),
        behindRows: null,
        behindMore: false,
        behindAgeS: null,
        stallS: stallMs / 1000,
        blocker: null,
        queues: null,
      };
      this.prev = this.counters(now);
      this.lags = [];
      this.lagSeen = 0;
      this.eventsRead = 0;
      // Per-queue activity since the last tick (this process's counters).
      const activity = new Map<string, { enqueued: number; claimed: number; acked: number; dead: number }>();
      for (const [q, c] of queues.counters.byQueue) {
        const cur = queueTotals(c);
        const was = this.prevQueues.get(q) ?? { enqueued: 0, claimed: 0, acked: 0, dead: 0 };
        activity.set(q, {
          enqueued: (cur.enqueued - was.enqueued) * perS,
          claimed: (cur.claimed - was.claimed) * perS,
          acked: (cur.acked - was.acked) * perS,
          dead: (cur.dead - was.dead) * perS,
        });
        this.prevQueues.set(q, cur);
      }
      this.tick++;

      const reads: Promise<unknown>[] = [
        this.read(() => queueStats(db, null)).then((qs) => {
          if (qs) sample.queues = qs.map((q) => queueSample(q, activity.get(q.name)));
        }),
        this.read(() => behind(db, position)).then((b) => {
          if (!b) return;
          sample.behindRows = Math.min(b.rows, BEHIND_CAP);
          sample.behindMore = b.rows > BEHIND_CAP;
          sample.behindAgeS = b.ageS;
        }),
      ];
      if (stallMs > 0) {
        reads.push(
          this.read(() => horizonBlocker(db)).then((r) => {
            if (r) sample.blocker = { pid: r.pid, applicationName: r.applicationName, ageS: r.ageSeconds };
          }),
        );
      }
      await Promise.all(reads);
      if (sample.queues === null || sample.behindAgeS === null) this.stats.failedTicks++;
      this.stats.ticks++;
      this.ring.push(sample);
      if (this.ring.length > this.capacity) this.ring.splice(0, this.ring.length - this.capacity);
      for (const fn of this.listeners) {
        try {
          fn(sample);
        } catch {
          // a listener's failure is its connection's problem, not the sampler's
        }
      }
      return sample;
    } finally {
      this.busy = false;
    }
  }

  /** The in-memory counters the rates are differences of. */
  private counters(at: number) {
    const { batcher, hub } = this.opts.feed;
    const { requests, events, statements } = batcher.stats;
    return { requests, events, statements, frames: hub.stats.frames, dropped: hub.stats.dropped, at };
  }

  private read<T>(fetch: () => Promise<T>): Promise<T | undefined> {
    this.stats.queries++;
    return fetch().catch(() => undefined);
  }
}

/** Internal streams (queue wake-ups) have a '/' in their name, which user stream names cannot. */
export function isInternal(stream: string): boolean {
  return stream.startsWith(queueStream(''));
}

function queueTotals(c: { enqueued: number; claimed: number; acked: number; deadLettered: number }) {
  return { enqueued: c.enqueued, claimed: c.claimed, acked: c.acked, dead: c.deadLettered };
}

function queueSample(
  q: QueueStats,
  a: { enqueued: number; claimed: number; acked: number; dead: number } | undefined,
): QueueSample {
  return {
    name: q.name,
    paused: q.paused,
    ready: q.ready,
    delayed: q.delayed,
    leased: q.leased,
    dead: q.dead,
    oldestReadyS: q.oldestReadyAgeSeconds,
    enqueued: a?.enqueued ?? 0,
    claimed: a?.claimed ?? 0,
    acked: a?.acked ?? 0,
    deadLettered: a?.dead ?? 0,
  };
}

/**
 * Rows past `position` (up to BEHIND_CAP + 1) and the age of the oldest of them. The tailer's position
 * may be a horizon point (txid, 0) rather than a row, so rows are counted, not ids subtracted.
 */
async function behind(db: Kysely<Database>, position: Cursor): Promise<{ rows: number; ageS: number }> {
  const { rows } = await sql<{ n: number; age: number | null }>`
    select (select count(*)::int4 from (
              select 1 from commitfeed.feed
              where (txid, id) > (${String(position.txid)}::xid8, ${String(position.id)}::int8)
              limit ${BEHIND_CAP + 1}) x) as n,
           (select extract(epoch from clock_timestamp() - created_at)::float8
            from commitfeed.feed
            where (txid, id) > (${String(position.txid)}::xid8, ${String(position.id)}::int8)
            order by txid, id limit 1) as age`.execute(db);
  return { rows: rows[0]?.n ?? 0, ageS: Math.max(0, rows[0]?.age ?? 0) };
}

function quantile(sorted: readonly number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
