/**
 * Group commit, for any write that gains from grouping: publishes (the feed passes appendCheckedEvents),
 * queue enqueues and acks, Mercure updates, each with its own `write`. Every notifying commit takes a
 * cluster-wide lock through its WAL flush, so one transaction per request caps the whole database;
 * instead, requests that arrive while a write is in flight wait together and go out as the next
 * single statement (one insert, one notify, one commit). When idle, a request is written at once: no
 * timer adds latency. A second statement beside one in flight starts once as many items wait as that
 * one carries (worthStarting), so load makes groups larger instead of making more statements.
 *
 * Lifecycle: created with the pool, `close()` waits for queued and in-flight writes. Failure: if a
 * grouped write fails because the database is unavailable, every request in it fails (HTTP 503);
 * any other failure retries the group in halves until the bad request stands alone, so it never
 * fails its neighbours.
 * Each request's events stay all-or-nothing either way.
 */
import type { Db } from '../db/database.ts';
import { ShuttingDownError } from '../errors.ts';
import { isUnavailable } from '../db/commit-outcome.ts';

interface Pending<I, R> {
  events: readonly I[];
  resolve(results: R[]): void;
  reject(err: unknown): void;
}

/** One grouped write: a single statement or transaction, returning one result per item, in order. */

export type GroupWrite<I, R> = (db: Db, items: readonly I[]) => Promise<R[]>;

export interface BatcherOptions<I, R> {
  /** Most items (events) in one statement (a request is never split). */
  maxEvents: number;
  /** Writes in flight at once: while one commits, the next can already insert. */
  maxInflight?: number;
  /** Called after every successful commit with its results (pokes the local tailer without waiting
   * for NOTIFY, when the write put rows in the feed). */
  onCommit?: (results: readonly R[]) => void;
  /** The grouped write. */
  write: GroupWrite<I, R>;
}

export class Batcher<I, R> {
  private queue: Pending<I, R>[] = [];
  private queuedEvents = 0;
  private inflight = 0;
  /** Items in the statements in flight. */
  private inflightEvents = 0;
  private idleWaiters: (() => void)[] = [];
  private closed = false;
  readonly stats = { statements: 0, events: 0, requests: 0 };

  constructor(
    private readonly db: Db,
    private readonly opts: BatcherOptions<I, R>,
  ) {}

  /** Statements in flight (in `write`, the calling statement's own included). */
  get inFlight(): number {
    return this.inflight;
  }

  /** Writes one request's items (all-or-nothing), grouped with concurrent requests. */
  publish(events: readonly I[]): Promise<R[]> {
    if (this.closed) return Promise.reject(new ShuttingDownError());
    return new Promise((resolve, reject) => {
      this.queue.push({ events, resolve, reject });
      this.queuedEvents += events.length;
      this.flush();
    });
  }

  private flush(): void {
    while (this.queue.length > 0 && this.inflight < (this.opts.maxInflight ?? 2) && this.worthStarting()) {
      const group: Pending<I, R>[] = [];
      let n = 0;
      while (
        this.queue.length > 0 &&
        (group.length === 0 || n + this.queue[0].events.length <= this.opts.maxEvents)
      ) {
        const p = this.queue.shift()!;
        n += p.events.length;
        group.push(p);
      }
      this.queuedEvents -= n;
      this.inflight++;
      this.inflightEvents += n;
      void this.write(group).finally(() => {
        this.inflight--;
        this.inflightEvents -= n;
        this.flush();
        if (this.inflight === 0 && this.queue.length === 0) for (const w of this.idleWaiters.splice(0)) w();
      });
    }
  }

  /**
   * With nothing in flight, any request goes at once. Beside a statement in flight, a new one starts
   * only once as many items wait as that statement carries (or a full group): under load, replies to
   * one group come back together and their clients' next requests arrive a few hundred µs apart, so
   * starting at the first would send a group of one beside one of dozens, and every statement costs
   * PostgreSQL and this process a round trip, a wake-up and a notifying commit. A lone request (light
   * load) still goes at once beside a statement of one. Measured: bench/HISTORY.md, "Hot path, round four".
   */
  private worthStarting(): boolean {
    if (this.inflight === 0) return true;
    return this.queuedEvents >= Math.min(this.inflightEvents / this.inflight, this.opts.maxEvents);
  }

  private async write(group: Pending<I, R>[]): Promise<void> {
    const events = group.length === 1 ? group[0].events : group.flatMap((p) => p.events);
    try {
      const results = await this.opts.write(this.db, events);
      this.stats.statements++;
      this.stats.events += events.length;
      this.stats.requests += group.length;
      this.opts.onCommit?.(results);
      let i = 0;
      for (const p of group) {
        p.resolve(results.slice(i, i + p.events.length));
        i += p.events.length;
      }
    } catch (err) {
      if (group.length === 1 || isUnavailable(err)) {
        for (const p of group) p.reject(err);
        return;
      }
      // Something in one request broke the shared statement: bisect to isolate it (log n extra
      // statements, not n).
      const half = group.length >>> 1;
      await Promise.all([this.write(group.slice(0, half)), this.write(group.slice(half))]);
    }
  }

  /** Stops taking requests and resolves once everything queued has been written. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.inflight === 0 && this.queue.length === 0) return;
    await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
  }
}
