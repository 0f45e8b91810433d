/**
 * The follower: turns the events of every active stream subscription into jobs. Each follow step is
 * one transaction (commitfeed.follow_subscription): read a page of the stream after the stream
 * subscription's cursor — finished transactions only, in (txid, id) order — enqueue the jobs, advance
 * the cursor. The cursor and the jobs commit together, so a crash anywhere repeats the step from the
 * old cursor and every event becomes exactly one job; the row lock (SKIP LOCKED) lets any number of
 * replicas run the follower, one of them working a given stream subscription at a time. A pass is one
 * round over the active stream subscriptions: when woken by events, over those whose streams had
 * some; every `pollIntervalMs`, over all (so N idle stream subscriptions cost no step per event).
 *
 * Lifecycle: one per process (when FLOWS is on), started and stopped by the server. It wakes when
 * the tailer reads an event of a followed stream (Feed.watch: the event has committed), when a
 * stream subscription is created or resumed here (`wake()`), and every `pollIntervalMs` (ones
 * created or resumed by other replicas, events whose wake-up was missed). `stop()` ends the loop
 * after the step in progress. The loop is src/flows/loop.ts.
 * Failure: a failed step is rolled back whole (nothing enqueued, cursor unmoved), logged, counted,
 * and retried at the next pass after a backoff (doubling from `pollIntervalMs` up to 30 s, back to
 * `pollIntervalMs` after a pass that succeeds); no event is lost or doubled by it. Events that
 * retention drops before the follower reaches them are counted by the janitor (src/retention), on the
 * stream subscription's status, in /metrics and in the log.
 */
import type { Kysely } from 'kysely';
import type { Database } from '../db/database.ts';
import type { Feed } from '../feed/feed.ts';
import { Loop } from './loop.ts';
import { followStep, listStreamSubscriptions, streamsPattern } from './stream-subscriptions.ts';

export interface FollowerOptions {
  db: Kysely<Database>;
  feed: Feed;
  /** Events per follow step (one transaction). */
  pageSize: number;
  pollIntervalMs: number;
  log: { warn(obj: object, msg?: string): void };
  /** After a step made jobs of `queue` committed: wake this process's waiting claims now, rather
   * than when the tailer reads the queue's wake-up row. */
  onJobs?(queue: string, jobs: number): void;
}

/** Longest wait after failed passes (doubling from pollIntervalMs). */
const MAX_BACKOFF_MS = 30_000;

export class Follower {
  /** Read by /metrics: jobs made, follow steps run, failed passes. */
  readonly stats = { jobs: 0, steps: 0, errors: 0 };
  private readonly loop: Loop;
  private unwatch: (() => void) | undefined;
  /** Active stream subscriptions by the streams they follow (as of the last pass): events of other
   * streams wake nobody. */
  private byStream = new Map<string, string[]>();
  /** Those over several streams, with their patterns (names and globs). */
  private patterns: [string, RegExp][] = [];
  /** Stream subscriptions whose streams had events since the current pass began. */
  private touched = new Set<string>();
  /** The next pass covers every active stream subscription (asked by wake(), or after a failure). */
  private fullDue = true;
  private lastFull = 0;
  /** Something happened since the current pass began: run another at once. */
  private dirty = false;

  constructor(private readonly opts: FollowerOptions) {
    this.loop = new Loop({
      pass: async () => {
        this.dirty = false;
        // A woken pass follows only the stream subscriptions whose streams had events; every
        // pollIntervalMs a full one follows all (those created or resumed by other replicas, cursors
        // of pattern subscriptions moving past other streams' events, wake-ups missed).
        const full = this.fullDue || Date.now() - this.lastFull >= this.opts.pollIntervalMs;
        const only = full ? null : this.touched;
        this.touched = new Set();
        this.fullDue = false;
        if (full) this.lastFull = Date.now();
        await this.pass(only);
        return this.dirty ? null : this.opts.pollIntervalMs;
      },
      onError: (err) => {
        this.stats.errors++;
        this.fullDue = true;
        this.opts.log.warn({ err: err.message }, 'subscription follower pass failed; retrying');
      },
      intervalMs: opts.pollIntervalMs,
      maxBackoffMs: MAX_BACKOFF_MS,
    });
  }

  start(): void {
    if (this.loop.running) return;
    this.unwatch = this.opts.feed.watch((events) => {
      let hit = false;
      for (const e of events) {
        for (const name of this.byStream.get(e.stream) ?? []) {
          this.touched.add(name);
          hit = true;
        }
        for (const [name, re] of this.patterns) {
          if (re.test(e.stream)) {
            this.touched.add(name);
            hit = true;
          }
        }
      }
      if (hit) {
        this.dirty = true;
        this.loop.wake();
      }
    });
    this.loop.start();
  }

  /** Runs a full pass now (or right after the one in progress). */
  wake(): void {
    this.fullDue = true;
    this.dirty = true;
    this.loop.wake();
  }

  async stop(): Promise<void> {
    this.unwatch?.();
    await this.loop.stop();
  }

  /**
   * One pass over the active stream subscriptions (every one, or those named in `only`): each is
   * followed until a step reads less than a page. Returns the jobs made (tests call it directly on a
   * stopped follower).
   */
  async pass(only: ReadonlySet<string> | null = null): Promise<number> {
    const active = await listStreamSubscriptions(this.opts.db, null, true);
    this.byStream = new Map();
    this.patterns = [];
    for (const s of active) {
      if (s.streams) this.patterns.push([s.name, new RegExp(streamsPattern(s.streams))]);
      else this.byStream.set(s.stream, [...(this.byStream.get(s.stream) ?? []), s.name]);
    }
    let jobs = 0;
    for (const s of active) {
      if (only && !only.has(s.name)) continue;
      for (;;) {
        if (this.loop.stopping) return jobs;
        const step = await followStep(this.opts.db, s.name, this.opts.pageSize);
        // Paused, deleted, or another replica is on it (it loops until caught up).
        if (step === null) break;
        this.stats.steps++;
        this.stats.jobs += step.jobs;
        jobs += step.jobs;
        if (step.jobs > 0) this.opts.onJobs?.(s.queue, step.jobs);
        if (step.read < this.opts.pageSize) break;
      }
    }
    return jobs;
  }
}
