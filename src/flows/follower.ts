/**
 * The follower: turns the events of every active stream subscription into jobs. Each follow step is
 * one transaction (commitfeed.follow_subscription): read a page of the stream after the stream
 * subscription's cursor — finished transactions only, in (txid, id) order — enqueue the jobs, advance
 * the cursor. The cursor and the jobs commit together, so a crash anywhere repeats the step from the
 * old cursor and every event becomes exactly one job; the row lock (SKIP LOCKED) lets any number of
 * replicas run the follower, one of them working a given stream subscription at a time. A pass is one
 * round over every active stream subscription.
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
  /** Streams of active stream subscriptions (as of the last pass): events of others do not wake us. */
  private streams = new Set<string>();
  /** The patterns of those over several streams (names and globs). */
  private patterns: RegExp[] = [];
  /** Something happened since the current pass began: run another at once. */
  private dirty = false;

  constructor(private readonly opts: FollowerOptions) {
    this.loop = new Loop({
      pass: async () => {
        this.dirty = false;
        await this.pass();
        return this.dirty ? null : this.opts.pollIntervalMs;
      },
      onError: (err) => {
        this.stats.errors++;
        this.opts.log.warn({ err: err.message }, 'subscription follower pass failed; retrying');
      },
      intervalMs: opts.pollIntervalMs,
      maxBackoffMs: MAX_BACKOFF_MS,
    });
  }

  start(): void {
    if (this.loop.running) return;
    this.unwatch = this.opts.feed.watch((events) => {
      for (const e of events) {
        if (this.streams.has(e.stream) || this.patterns.some((p) => p.test(e.stream))) {
          this.wake();
          return;
        }
      }
    });
    this.loop.start();
  }

  /** Runs a pass now (or right after the one in progress). */
  wake(): void {
    this.dirty = true;
    this.loop.wake();
  }

  async stop(): Promise<void> {
    this.unwatch?.();
    await this.loop.stop();
  }

  /**
   * One pass over every active stream subscription: each is followed until a step reads less than a page.
   * Returns the jobs made (tests call it directly on a stopped follower).
   */
  async pass(): Promise<number> {
    const active = await listStreamSubscriptions(this.opts.db, null, true);
    this.streams = new Set(active.filter((s) => s.streams === null).map((s) => s.stream));
    this.patterns = active.flatMap((s) => (s.streams ? [new RegExp(streamsPattern(s.streams))] : []));
    let jobs = 0;
    for (const s of active) {
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
