/**
 * One process's feed machinery, wired together: the batcher (writes), the listener (NOTIFY), the
 * tailer (reads the global tail) and the hub (fan-out). Follow one event: batcher.publish →
 * appendCheckedEvents commits (own-writes.ts holds a keyless group's events) → tailer.committed hands
 * them on from memory when the statement's answer allows (cleared.ts), or pokes a read (other
 * processes hear the NOTIFY through their listener) → tailer.readTail (which skips the held events'
 * rows; the tailer puts them in) → hub.onEvents → the subscriber's SSE frame.
 */
import type { Kysely } from 'kysely';
import type { Database } from '../db/database.ts';
import { Batcher } from '../commit/batcher.ts';
import { Hub } from './hub.ts';
import type { CheckedEventInput, FeedEvent } from './event.ts';
import { Listener } from './listener.ts';
import { OwnWrites } from './own-writes.ts';
import type { AppendResult } from './queries/append.ts';
import { appendCheckedEvents } from './queries/append-checked.ts';
import type { FeedHistory } from './history.ts';
import { FeedReads, type StandbyDb } from './reads.ts';
import { Tailer } from './tailer.ts';

export interface FeedOptions {
  db: Kysely<Database>;
  /** The tail read's own connection to the primary (generic plans; see server.ts); default `db`. */
  tailDb?: Kysely<Database>;
  databaseUrl: string;
  /** Backend pids of `db`'s pool (createDatabase): notifications from them are this process's own. */
  ownSessions?: ReadonlySet<number>;
  batchMaxEvents: number;
  pageSize: number;
  windowEvents: number;
  pollIntervalMs: number;
  /** IDLE_READ_DELAY: how long a commit's tail read may wait while nobody here waits for events. */
  idleReadDelayMs?: number;
  /** See TAIL_FLOOR_MARGIN (tail-floor.ts); absent or 0: the tail read covers every partition. */
  tailFloorMarginMs?: number;
  heartbeatMs: number;
  sseRetryMs: number;
  /** The slow-reader limits (hub.ts, slow-readers.ts). */
  slowSubscriberMaxMs?: number;
  sseMaxInFlightBytes?: number;
  sseMaxTotalInFlightBytes?: number;
  /** Streaming standbys for the tailer's and catch-up reads (READ_DATABASE_URL; see reads.ts). */
  standbys?: readonly StandbyDb[];
  /** READ_LAG_WAIT: how long a read waits for a standby's replay before going to the primary. */
  readLagWaitMs?: number;
  log: { warn(obj: object, msg?: string): void; info(obj: object, msg?: string): void };
}

export class Feed {
  /** The primary's pool (writes, and reads that must see the primary). */
  readonly db: Kysely<Database>;
  readonly batcher: Batcher<CheckedEventInput, AppendResult>;
  readonly tailer: Tailer;
  readonly hub: Hub;
  readonly listener: Listener;
  readonly reads: FeedReads;
  /** The feed's tag on every cursor it mints, and the check of cursors clients bring (history.ts). */
  readonly history: FeedHistory;
  /** This process's commits the tailer has not yet read past (see own-writes.ts). */
  readonly own: OwnWrites;
  /** Read-only observers of every page the tailer reads (the live page's sampler counts them). */
  private readonly watchers = new Set<(events: readonly FeedEvent[]) => void>();

  constructor(opts: FeedOptions) {
    this.db = opts.db;
    this.reads = new FeedReads(opts.db, opts.standbys ?? [], {
      tailPrimary: opts.tailDb,
      lagWaitMs: opts.readLagWaitMs ?? 1000,
      log: opts.log,
    });
    // Held until the tailer has read past them: at most a window's worth (see own-writes.ts).
    this.own = new OwnWrites(opts.windowEvents);
    this.tailer = new Tailer(opts.db, {
      reads: this.reads,
      own: this.own,
      pageSize: opts.pageSize,
      windowEvents: opts.windowEvents,
      pollIntervalMs: opts.pollIntervalMs,
      // A publish-only process reads the feed once per stretch, not once per commit (see tailer.ts).
      idle: () => this.hub.idle,
      idleDelayMs: opts.idleReadDelayMs ?? 0,
      floorMarginMs: opts.tailFloorMarginMs ?? 0,
      log: opts.log,
      onEvents: (events) => {
        this.hub.onEvents(events);
        for (const watch of this.watchers) watch(events);
      },
    });
    this.history = this.tailer.history;
    this.hub = new Hub(this.tailer, {
      pageSize: opts.pageSize,
      heartbeatMs: opts.heartbeatMs,
      sseRetryMs: opts.sseRetryMs,
      slowSubscriberMaxMs: opts.slowSubscriberMaxMs,
      sseMaxInFlightBytes: opts.sseMaxInFlightBytes,
      sseMaxTotalInFlightBytes: opts.sseMaxTotalInFlightBytes,
      log: opts.log,
    });
    this.batcher = new Batcher(opts.db, {
      maxEvents: opts.batchMaxEvents,
      // One autocommit statement per group: committed when it returns, so its events may be held.
      // Results carry the feed's tag on their cursors, as every cursor the service answers with.
      // The tailer's question rides on the statement: a yes hands the events on without a read.
      write: async (db, events) => {
        const probe = this.tailer.clearProbe();
        let results: AppendResult[];
        try {
          results = await appendCheckedEvents(db, events, this.own, probe);
        } catch (err) {
          // A commit handed on from memory may be waiting for this statement (Tailer.committed).
          this.tailer.wake();
          throw err;
        }
        this.tailer.committed(probe, this.batcher.inFlight > 1);
        return this.history.tagged(results);
      },
    });
    this.listener = new Listener({
      url: opts.databaseUrl,
      onNotify: () => this.tailer.wake(),
      ownSessions: opts.ownSessions,
      log: opts.log,
    });
  }

  /** Calls `fn` with each page of events the tailer reads, after fan-out; returns what stops the calls. */
  watch(fn: (events: readonly FeedEvent[]) => void): () => void {
    this.watchers.add(fn);
    return () => this.watchers.delete(fn);
  }

  async start(): Promise<void> {
    await this.reads.start();
    await this.tailer.start();
    await this.listener.start();
  }

  /** Ends SSE subscribers with `retry:` hints and releases long-polls (the first step of shutdown). */
  endSubscribers(retryMs: number): void {
    this.hub.close(`retry: ${retryMs}\n: server shutting down\n\n`);
  }

  /** Ends subscribers, finishes in-flight writes, then stops reading. */
  async stop(retryMs: number): Promise<void> {
    this.endSubscribers(retryMs);
    await this.batcher.close();
    this.tailer.stop();
    this.reads.stop();
    await this.listener.stop();
  }
}
