/**
 * The scheduler: enqueues one job per tick of every active cron schedule. Every replica runs one;
 * a tick's job is enqueued exactly once whichever of them gets there (see fireSchedule: the
 * (schedule, tick) primary key, in the transaction that enqueues).
 *
 * Lifecycle: one per process (when FLOWS is on), started and stopped by the server. Each pass lists
 * the active schedules and fires those with a tick due since their last one; it then sleeps until
 * the next tick of any of them, at most MAX_SLEEP_MS (schedules created elsewhere are seen within
 * that). `runOnce(now)` does one pass at a chosen time (tests move the clock instead of waiting).
 * `wake()` cuts the sleep short (a wake during a pass is not remembered: the next pass is at most
 * MAX_SLEEP_MS away). `stop()` ends the loop after the pass in progress. The loop is src/flows/loop.ts.
 * Failure: a firing is one transaction: on error nothing of it is kept, it is logged and counted,
 * and the next pass fires the same ticks (the catch-up policy decides about ticks that became late
 * meanwhile). A pass that fails as a whole (listing the schedules) is logged, counted and retried
 * after MAX_SLEEP_MS. While every replica is down nothing fires; on restart the catch-up policy applies.
 */
import type { Kysely } from 'kysely';
import type { Database } from '../db/database.ts';
import { Loop } from './loop.ts';
import { fireSchedule, listSchedules, nextTick } from './schedules.ts';

export interface SchedulerOptions {
  db: Kysely<Database>;
  /** A tick enqueued more than this after its time is late (a missed tick: see the catch-up policy). */
  lateAfterMs: number;
  /** Called after a pass enqueued jobs (the server pokes the tailer: claimers wake sooner). */
  onEnqueued?: () => void;
  log: { warn(obj: object, msg?: string): void };
  /** The clock (tests inject one). */
  now?: () => Date;
}

/** Longest sleep between passes: how soon a schedule created by another replica is seen. */
const MAX_SLEEP_MS = 1000;

export class Scheduler {
  /** Read by /metrics. */
  readonly stats = { passes: 0, jobs: 0, errors: 0 };
  private readonly loop: Loop;
  private readonly now: () => Date;

  constructor(private readonly opts: SchedulerOptions) {
    this.now = opts.now ?? (() => new Date());
    this.loop = new Loop({
      pass: async () => {
        const { next } = await this.runOnce();
        return next
          ? Math.min(MAX_SLEEP_MS, Math.max(0, next.getTime() - this.now().getTime()))
          : MAX_SLEEP_MS;
      },
      onError: (err) => {
        this.stats.errors++;
        this.opts.log.warn({ err: err.message }, 'scheduler pass failed; retrying');
      },
      // No growing backoff: a firing's own failure is caught in runOnce, so only the listing fails
      // here, and it is retried as soon as a schedule created elsewhere would be seen (MAX_SLEEP_MS).
      intervalMs: MAX_SLEEP_MS,
      maxBackoffMs: MAX_SLEEP_MS,
    });
  }

  start(): void {
    this.loop.start();
  }

  /** Runs a pass now (a schedule was created or resumed here). */
  wake(): void {
    this.loop.wake();
  }

  async stop(): Promise<void> {
    await this.loop.stop();
  }

  /** One pass at `now`: fires every active schedule with a tick due. Returns the jobs enqueued and
   * when the next tick of any schedule is (null: none). */
  async runOnce(now: Date = this.now()): Promise<{ jobs: number; next: Date | null }> {
    const schedules = await listSchedules(this.opts.db, null, true, now);
    let jobs = 0;
    let next: Date | null = null;
    for (const s of schedules) {
      const after = s.lastTick === null ? null : nextTick(s.cron, s.timezone, new Date(s.lastTick));
      if (s.lastTick === null || (after !== null && after <= now)) {
        try {
          jobs += (await fireSchedule(this.opts.db, s.name, now, this.opts.lateAfterMs)) ?? 0;
        } catch (err) {
          this.stats.errors++;
          this.opts.log.warn(
            { schedule: s.name, err: (err as Error).message },
            'schedule firing failed; retried next pass',
          );
        }
      }
      const n = nextTick(s.cron, s.timezone, now);
      if (n && (next === null || n < next)) next = n;
    }
    this.stats.passes++;
    this.stats.jobs += jobs;
    if (jobs > 0) this.opts.onEnqueued?.();
    return { jobs, next };
  }
}
