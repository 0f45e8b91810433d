/**
 * The janitor: keeps the feed's partitions created ahead of the clock, drops whole partitions once
 * they are older than the retention (raising the trim mark, and letting the drop hook count what
 * readers had not reached, in the same transaction), trims idempotency keys past the dedup window,
 * runs the tasks the features hand it (their own tables' history: dead and finished jobs, schedule
 * ticks, the Mercure topic index; see JanitorTask) — never with a DELETE storm on a hot table — and
 * ANALYZEs tables whose rows changed a lot (where autovacuum is off, nothing else keeps the
 * planner's statistics current).
 *
 * Lifecycle: one per process, built and started by the server (src/server.ts) after the feed. Every `janitorIntervalMs` (and once at start) it
 * tries a session advisory lock on a connection of its own: exactly one instance does maintenance at
 * a time, the others skip that run (`stats.skipped`); a partition change also waits for a migration
 * run in progress (src/db/locks.ts has the locks and their order). `runOnce()` does one pass now
 * (the operator command and tests call it, with a `now` of their choosing). Between runs, every
 * 10 s, a statistics check ANALYZEs tables that at least doubled since their last analyze (a fresh
 * feed on a database with autovacuum off would otherwise run up to a whole interval without
 * statistics); it needs no lock (ANALYZE does not block writes; a partition another instance drops
 * meanwhile is skipped); a failed check is logged and retried at the next one.
 * `stop()` cancels the timers and waits for a run or check in progress.
 * Failure: every step is its own short transaction with a lock timeout, so a busy feed costs a
 * skipped step, not a stalled publish; a failed step is logged and recorded in
 * commitfeed.janitor_runs, and the next run retries. Nothing is lost by a missed run: partitions are
 * created several intervals ahead, and rows that find no partition go to the default partition.
 */
import { hostname } from 'node:os';
import { type Kysely, sql } from 'kysely';
import type { Config } from '../config/config.ts';
import type { Database } from '../db/database.ts';
import type { Db } from '../db/database.ts';
import { JANITOR_LOCK } from '../db/locks.ts';
import {
  type DropHook,
  type Loss,
  analyzeChanged,
  createPartition,
  dropPartition,
  listPartitions,
  partitionName,
  trimDefaultPartition,
  trimKeys,
} from './partitions.ts';

/**
 * Work a feature hands the janitor: run every pass, in order, under the janitor's lock and on its
 * connection, after the feed's own steps (so it sees this pass's drops and the raised trim mark).
 * A task that throws is logged and recorded as its step's error; the next pass retries.
 */
export interface JanitorTask {
  /** The step's name in errors and logs. */
  name: string;
  /** Returns what it trimmed, counted by name (the run's `trimmed` and janitor_runs' summary). */
  run(db: Db, now: Date): Promise<Record<string, number>>;
}

/** The retention settings (documented in src/config/retention.ts); janitorIntervalMs 0: no timer, runOnce only. */
export interface JanitorOptions
  extends Pick<
    Config,
    | 'retentionMs'
    | 'jobRetentionMs'
    | 'partitionIntervalMs'
    | 'partitionPremake'
    | 'dedupWindowMs'
    | 'janitorIntervalMs'
    | 'janitorLockTimeoutMs'
  > {
  log: { warn(obj: object, msg?: string): void; info(obj: object, msg?: string): void };
  /** The features' steps (see JanitorTask). */
  tasks?: readonly JanitorTask[];
  /** Runs in the transaction that drops feed rows (see DropHook); its losses are counted and logged. */
  onDrop?: DropHook;
  /** The clock (tests move it instead of sleeping for days). */
  now?: () => Date;
}

export interface JanitorRun {
  /** False when another instance held the lock: this one did nothing. */
  ran: boolean;
  created: string[];
  dropped: string[];
  defaultRowsTrimmed: number;
  /**
   * Rows deleted, by name: `keys` (idempotency keys past DEDUP_WINDOW) and each task's counts
   * (`deadJobs`, `finishedJobs`, `scheduleTicks`, `mercureTopics`).
   */
  trimmed: Record<string, number>;
  /** Events dropped before a stream subscription turned them into jobs, per stream subscription. */
  lost: Loss[];
  /** Tables ANALYZEd because their rows changed a lot since their statistics were taken. */
  analyzed: string[];
  errors: string[];
  durationMs: number;
}

/** How often the statistics check runs between maintenance runs (see analyzeChanged's 'doubled'). */
const STATS_CHECK_MS = 10_000;

export class Janitor {
  private timer: NodeJS.Timeout | undefined;
  private statsTimer: NodeJS.Timeout | undefined;
  private checking: Promise<void> | undefined;
  private checkFailing = false;
  private running: Promise<JanitorRun> | undefined;
  private stopped = true;
  /** Read by /metrics. lastRunAt: epoch ms of the last run this process did (0: none). */
  readonly stats = {
    runs: 0,
    skipped: 0,
    errors: 0,
    lastRunAt: 0,
    lastDurationMs: 0,
    dropped: 0,
    created: 0,
    /** Events dropped before a stream subscription turned them into jobs (this process's runs). */
    lostEvents: 0,
  };

  constructor(
    private readonly db: Kysely<Database>,
    private readonly opts: JanitorOptions,
  ) {}

  start(): void {
    if (this.opts.janitorIntervalMs <= 0) return;
    this.stopped = false;
    this.schedule(0);
    this.statsTimer = setInterval(() => {
      if (this.checking === undefined) {
        this.checking = this.checkStatistics().finally(() => {
          this.checking = undefined;
        });
      }
    }, STATS_CHECK_MS);
    this.statsTimer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    clearInterval(this.statsTimer);
    await this.running?.catch(() => {});
    await this.checking;
  }

  /** The frequent statistics check (see the lifecycle note): never throws. */
  private async checkStatistics(): Promise<void> {
    try {
      const analyzed = await analyzeChanged(this.db, 1000, 'doubled');
      this.checkFailing = false;
      if (analyzed.length > 0) this.opts.log.info({ analyzed }, 'statistics of growing tables refreshed');
    } catch (err) {
      // Once per outage, not every 10 s of it.
      if (!this.checkFailing) {
        this.opts.log.warn({ err: (err as Error).message }, 'statistics check failed; retrying every 10 s');
      }
      this.checkFailing = true;
    }
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.runOnce().then(
        () => this.schedule(this.opts.janitorIntervalMs),
        () => this.schedule(this.opts.janitorIntervalMs),
      );
    }, ms);
    this.timer.unref();
  }

  /**
   * One maintenance pass, unless another instance is doing one (then `ran: false`).
   *
   * @example
   *   const run = await new Janitor(db, { ...config, log }).runOnce(new Date());
   */
  runOnce(now: Date = this.opts.now?.() ?? new Date()): Promise<JanitorRun> {
    // One pass at a time in this process too (the timer and an explicit call may overlap).
    const p = (this.running ?? Promise.resolve()).catch(() => {}).then(() => this.pass(now));
    this.running = p;
    return p;
  }

  private async pass(now: Date): Promise<JanitorRun> {
    const started = Date.now();
    const run: JanitorRun = {
      ran: false,
      created: [],
      dropped: [],
      defaultRowsTrimmed: 0,
      trimmed: {},
      lost: [],
      analyzed: [],
      errors: [],
      durationMs: 0,
    };
    await this.db.connection().execute(async (conn) => {
      const { rows } = await sql<{ ok: boolean }>`
        select pg_try_advisory_lock(hashtext(${JANITOR_LOCK})) as ok`.execute(conn);
      if (!rows[0].ok) {
        this.stats.skipped++;
        return;
      }
      run.ran = true;
      try {
        await this.steps(conn, now, run);
        run.durationMs = Date.now() - started;
        await record(conn, started, run).catch((err: Error) => run.errors.push(`record: ${err.message}`));
      } finally {
        await sql`select pg_advisory_unlock(hashtext(${JANITOR_LOCK}))`.execute(conn).catch(() => {});
      }
    });
    run.durationMs = Date.now() - started;
    if (run.ran) this.report(started, run);
    return run;
  }

  /** The pass's steps in order: the feed's own, then the features' tasks, then statistics. */
  private async steps(conn: Kysely<Database>, now: Date, run: JanitorRun): Promise<void> {
    await this.step(run, 'partitions', () => this.ensurePartitions(conn, now, run));
    await this.step(run, 'retention', () => this.dropExpired(conn, now, run));
    const dedupBefore = new Date(now.getTime() - this.opts.dedupWindowMs);
    await this.step(run, 'keys', async () => {
      run.trimmed.keys = await trimKeys(conn, dedupBefore);
    });
    for (const task of this.opts.tasks ?? []) {
      await this.step(run, task.name, async () => {
        Object.assign(run.trimmed, await task.run(conn, now));
      });
    }
    await this.step(run, 'statistics', async () => {
      run.analyzed = await analyzeChanged(conn);
    });
  }

  /** A pass this process did: its stats (for /metrics) and its log lines. */
  private report(started: number, run: JanitorRun): void {
    this.stats.runs++;
    this.stats.lastRunAt = started;
    this.stats.lastDurationMs = run.durationMs;
    this.stats.created += run.created.length;
    this.stats.dropped += run.dropped.length;
    this.stats.errors += run.errors.length;
    for (const l of run.lost) {
      this.stats.lostEvents += l.events;
      this.opts.log.warn(
        { subscription: l.subscription, events: l.events },
        'retention dropped events before this stream subscription turned them into jobs (counted in its lostEvents)',
      );
    }
    if (run.created.length + run.dropped.length + run.analyzed.length > 0 || run.errors.length > 0) {
      this.opts.log.info(
        {
          created: run.created,
          dropped: run.dropped,
          analyzed: run.analyzed,
          errors: run.errors,
          ms: run.durationMs,
        },
        'feed maintenance',
      );
    }
  }

  private async step(run: JanitorRun, name: string, fn: () => Promise<void>): Promise<void> {
    try {
      await fn();
    } catch (err) {
      const message = (err as Error).message;
      run.errors.push(`${name}: ${message}`);
      this.opts.log.warn({ step: name, err: message }, 'feed maintenance step failed; retried next run');
    }
  }

  /** Partitions up to `now + premake × interval`, continuing the series after the newest one. */
  private async ensurePartitions(db: Kysely<Database>, now: Date, run: JanitorRun): Promise<void> {
    const interval = this.opts.partitionIntervalMs;
    const until = now.getTime() + this.opts.partitionPremake * interval;
    const parts = await listPartitions(db);
    const newest = Math.max(-Infinity, ...parts.filter((p) => p.to !== null).map((p) => p.to!));
    let from = Number.isFinite(newest) ? newest : Math.floor(now.getTime() / interval) * interval;
    // A janitor that was off for a long time: no point creating partitions entirely in the past.
    if (from + interval <= now.getTime()) from = Math.floor(now.getTime() / interval) * interval;
    for (; from < until; from += interval) {
      const lo = new Date(from);
      const ok = await createPartition(db, lo, new Date(from + interval), this.opts.janitorLockTimeoutMs);
      if (ok) run.created.push(partitionName(lo));
      else {
        this.opts.log.warn(
          { from: lo.toISOString() },
          'feed rows for this range are in the default partition; they stay there (dropped by age)',
        );
      }
    }
  }

  /** Drops every partition whose upper bound is at or before `now - retention`, oldest first. */
  private async dropExpired(db: Kysely<Database>, now: Date, run: JanitorRun): Promise<void> {
    const before = now.getTime() - this.opts.retentionMs;
    for (const p of await listPartitions(db)) {
      if (p.isDefault || p.to === null || p.to > before) continue;
      const lost: Loss[] = [];
      await dropPartition(db, p, this.opts.janitorLockTimeoutMs, this.opts.onDrop, lost);
      run.dropped.push(p.name);
      run.lost.push(...lost);
    }
    const lost: Loss[] = [];
    run.defaultRowsTrimmed = await trimDefaultPartition(db, new Date(before), this.opts.onDrop, lost);
    run.lost.push(...lost);
  }
}

/** The last run, for every instance to read (feedStats, /metrics, `npm run maint -- stats`). */
async function record(conn: Kysely<Database>, started: number, run: JanitorRun): Promise<void> {
  const summary = { created: run.created, dropped: run.dropped, ...run.trimmed, analyzed: run.analyzed };
  await sql`
    insert into commitfeed.janitor_runs (started_at, duration_ms, instance, error, summary)
    values (${new Date(started).toISOString()}::timestamptz, ${run.durationMs}, ${`${hostname()}:${process.pid}`},
            ${run.errors.length > 0 ? run.errors.join('; ') : null}, ${JSON.stringify(summary)}::jsonb)
    on conflict (singleton) do update set started_at = excluded.started_at,
      duration_ms = excluded.duration_ms, instance = excluded.instance, error = excluded.error,
      summary = excluded.summary`.execute(conn);
}
