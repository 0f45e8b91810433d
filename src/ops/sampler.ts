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
import type { Kysely } from 'kysely';
import type { Database } from '../db/database.ts';
import { type Cursor, formatCursor } from '../feed/cursor.ts';
import type { FeedEvent } from '../feed/event.ts';
import type { Feed } from '../feed/feed.ts';
import { horizonBlocker } from '../feed/queries/horizon-blocker.ts';
import { queueStats } from '../queues/admin.ts';
import type { Queues } from '../queues/queues.ts';
import { listStreams } from '../streams/queries.ts';
import { BEHIND_CAP, behind } from './behind.ts';
import { DeliveryLags } from './delivery-lag.ts';
import { type QueueActivity, QueueRates, type QueueSample, queueSample } from './queue-activity.ts';
import { StreamActivity, type StreamRow } from './stream-activity.ts';

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
  /** Bytes written to SSE sockets and not yet acknowledged (Node and kernel; see sample()). */
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
  private readonly streams: StreamActivity;
  private readonly queueRates: QueueRates;
  private readonly lags = new DeliveryLags();
  private readonly listeners = new Set<(s: Sample) => void>();
  private timer: NodeJS.Timeout | undefined;
  private unwatch: (() => void) | undefined;
  private busy = false;
  private eventsRead = 0;
  private prev = { requests: 0, events: 0, statements: 0, frames: 0, dropped: 0, at: 0 };
  readonly intervalMs: number;
  readonly capacity: number;
  /** Database statements the sampler issued, and ticks taken: the whole cost of every live page. */
  readonly stats = { queries: 0, ticks: 0, failedTicks: 0, skippedTicks: 0 };

  constructor(private readonly opts: SamplerOptions) {
    this.intervalMs = opts.intervalMs ?? 1000;
    this.capacity = opts.capacity ?? Math.round(600_000 / this.intervalMs);
    this.streams = new StreamActivity(this.intervalMs);
    this.queueRates = new QueueRates(opts.queues.counters);
  }

  async start(): Promise<void> {
    this.prev = this.counters(Date.now());
    this.queueRates.start();
    this.unwatch = this.opts.feed.watch((events) => this.onEvents(events));
    // Streams that were written before this process started, with their last event time; rates then
    // come from what the tailer reads. A failed read only leaves them out until they see an event.
    try {
      this.stats.queries++;
      const { streams } = await listStreams(this.opts.db, { limit: 1000, window: 1000 });
      this.streams.seed(streams);
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

  /** Calls `fn` with each new sample; returns what stops the calls. */
  watch(fn: (s: Sample) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** User streams by recent activity (busiest first, then most recent). */
  streamRows(): StreamRow[] {
    return this.streams.rows();
  }

  private onEvents(events: readonly FeedEvent[]): void {
    const now = Date.now();
    this.eventsRead += events.length;
    for (const e of events) {
      // Every event costs a map lookup; lags are kept up to a bound, then sampled evenly.
      this.lags.add(now - e.ms);
      this.streams.count(e);
    }
  }

  /** One tick: in-memory counters now, database reads in parallel, then publish the sample. */
  async sample(): Promise<Sample | undefined> {
    if (this.busy) {
      this.stats.skippedTicks++;
      return undefined;
    }
    this.busy = true;
    try {
      const now = Date.now();
      const perS = 1000 / Math.max(1, now - this.prev.at);
      const { position, horizonStallMs } = this.opts.feed.tailer;
      const sample = this.fromMemory(now, perS, position, horizonStallMs);
      // Per-queue activity since the last tick (this process's counters).
      const activity = this.queueRates.tick(perS);
      this.streams.advance();
      await this.fromDatabase(sample, activity, position, horizonStallMs > 0);
      this.record(sample);
      return sample;
    } finally {
      this.busy = false;
    }
  }

  /** The tick's in-memory part: rates since the last tick; the database-backed fields still null. */
  private fromMemory(now: number, perS: number, position: Cursor, stallMs: number): Sample {
    const { batcher, hub } = this.opts.feed;
    const b = batcher.stats;
    const h = hub.stats;
    const commits = b.statements - this.prev.statements;
    const written = b.events - this.prev.events;
    const lag = this.lags.take();
    const sample: Sample = {
      t: now,
      publishes: (b.requests - this.prev.requests) * perS,
      eventsWritten: written * perS,
      commits: commits * perS,
      batch: commits === 0 ? null : written / commits,
      eventsRead: this.eventsRead * perS,
      lagP50Ms: lag.p50,
      lagP99Ms: lag.p99,
      lagMaxMs: lag.max,
      sseConnections: hub.openStreams,
      frames: (h.frames - this.prev.frames) * perS,
      // Node's unsent bytes now, or the most the slow-reader sweeps measured in flight (Node and
      // the kernel's send queues) since the last sample: a stalled reader is dropped within a second.
      sseBufferedBytes: Math.max(hub.bufferedBytes(), hub.slow.takePeak()),
      slowDropped: (h.dropped - this.prev.dropped) * perS,
      position: formatCursor(position, this.opts.feed.history.tag),
      behindRows: null,
      behindMore: false,
      behindAgeS: null,
      stallS: stallMs / 1000,
      blocker: null,
      queues: null,
    };
    this.prev = this.counters(now);
    this.eventsRead = 0;
    return sample;
  }

  /** The tick's database reads, in parallel; a read that fails leaves its fields null. */
  private async fromDatabase(
    sample: Sample,
    activity: ReadonlyMap<string, QueueActivity>,
    position: Cursor,
    stalled: boolean,
  ): Promise<void> {
    const { db } = this.opts;
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
    if (stalled) {
      reads.push(
        this.read(() => horizonBlocker(db)).then((r) => {
          if (r) sample.blocker = { pid: r.pid, applicationName: r.applicationName, ageS: r.ageSeconds };
        }),
      );
    }
    await Promise.all(reads);
  }

  /** Keeps the sample in the ring and hands it to every listener. */
  private record(sample: Sample): void {
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
