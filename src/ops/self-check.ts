/**
 * The self-check: every SELF_CHECK_INTERVAL each process writes a tiny marker to the internal stream
 * `commitfeed/selfcheck` (feed/marker.ts: no reader ever sees it) and follows it through its own
 * delivery path within SELF_CHECK_BOUND (self-check-run.ts): commit, wake, tail read, hub. A pipeline
 * can stop delivering while the database answers, the LISTEN connection counts as up and the tailer
 * reports no error (a half-dead connection, a pooler that drops NOTIFY, a read waiting on a lock, a
 * fan-out that throws); the marker is an event like any other, so its path stalls with theirs.
 *
 * A miss is counted by stage (/metrics), logged once naming the stalled stage and what to look at,
 * and shown by /readyz: SELF_CHECK_MISSES consecutive checks whose marker was not read or not fanned
 * out make it 503 (this process delivers nothing live; another replica may). A stalled wake only
 * reports `degraded`: the fallback poll still delivers, late. So does a stalled commit: publishes
 * wait on the same database for every replica, and the database check fails when it is down. A
 * marker held behind the horizon by an open transaction anywhere in the cluster is a `horizon` miss,
 * logged with the backend holding it, and never fails /readyz: every replica waits for it alike, and
 * all leaving rotation together helps nobody.
 *
 * Lifecycle: start() schedules the first check one interval later (off with SELF_CHECK_INTERVAL=0);
 * one check at a time, the next `intervalMs` after the last began or when it ends if later. A marker
 * whose commit has not returned is not followed by another: each check meanwhile is a commit miss
 * without a write, so a stalled database never holds more than one pool connection for it. A marker
 * refused because this deployment cannot write (a read-only transaction or role, no privilege) turns
 * the check off with one log line. stop() cancels the timer; a check in flight ends at its bound.
 * Cost: one small autocommit insert with its NOTIFY, and one tail read, per interval (measured in
 * docs/operations.md#self-check).
 */
import { randomBytes } from 'node:crypto';
import type { Kysely } from 'kysely';
import { formatMs } from '../config/settings.ts';
import type { Database } from '../db/database.ts';
import { formatCursor } from '../feed/cursor.ts';
import type { Feed } from '../feed/feed.ts';
import { markerPrefixOf } from '../feed/marker.ts';
import { horizonBlocker } from '../feed/queries/horizon-blocker.ts';
import type { Measured, Metrics } from '../metrics.ts';
import { MarkerRun, STAGES, type Stage } from './self-check-run.ts';

/** A stage a check missed; `horizon`: the tail read waited for an open transaction (not this process's fault). */
export type Miss = Stage | 'horizon';
const MISSES: readonly Miss[] = [...STAGES, 'horizon'];

export interface SelfCheckStatus {
  /** ok: the last check passed (or none has run yet); degraded: it missed a stage; failing: /readyz is 503. */
  state: 'ok' | 'degraded' | 'failing';
  /** The stages the last check missed. */
  stalled: Miss[];
  /** Consecutive checks whose marker was not read or not fanned out in time (reset by one that was). */
  consecutiveMisses: number;
  /** When a check last passed every stage (ISO time), null before the first. */
  lastOkAt: string | null;
}

export interface SelfCheckOptions {
  db: Kysely<Database>;
  feed: Feed;
  /** SELF_CHECK_INTERVAL (0: off), SELF_CHECK_BOUND, SELF_CHECK_MISSES. */
  intervalMs: number;
  boundMs: number;
  misses: number;
  log: { warn(obj: object, msg?: string): void; info(obj: object, msg?: string): void };
}

/** SQLSTATEs of a write this deployment may never make: read_only_sql_transaction, insufficient_privilege. */
const CANNOT_WRITE = new Set(['25006', '42501']);

export class SelfCheck implements Measured {
  /** Tells this process's markers from other processes' (their NOTIFY payloads start with it). */
  private readonly prefix = markerPrefixOf(randomBytes(6).toString('hex'));
  private seq = 0;
  private running = false;
  private timer: NodeJS.Timeout | undefined;
  /** The marker being followed. */
  private run: MarkerRun | undefined;
  /** A marker's write that has not returned (its check missed the commit). */
  private writing: Promise<void> | undefined;
  private stalled: Miss[] = [];
  /** Consecutive checks whose marker the tail read or the hub missed (what fails /readyz). */
  private streak = 0;
  /** Consecutive checks with any miss (for the recovery line). */
  private missedChecks = 0;
  private lastOkAt = 0;
  /** checks: markers followed; misses by stage; seconds: the last check's time to each stage. */
  readonly stats = {
    checks: 0,
    misses: Object.fromEntries(MISSES.map((m) => [m, 0])) as Record<Miss, number>,
    seconds: {} as Partial<Record<Stage, number>>,
  };

  constructor(private readonly opts: SelfCheckOptions) {}

  /** Running: configured on and not turned off (a deployment that cannot write). */
  get enabled(): boolean {
    return this.running;
  }

  start(): void {
    if (this.opts.intervalMs === 0) return;
    this.running = true;
    this.opts.feed.listener.hearMarkers({ prefix: this.prefix, heard: (p) => this.run?.heard(p) });
    this.schedule(this.opts.intervalMs);
  }

  stop(): void {
    this.running = false;
    clearTimeout(this.timer);
    this.opts.feed.listener.hearMarkers(undefined);
    this.run?.cancel();
  }

  /** What /readyz shows; undefined while the check is off. */
  status(): SelfCheckStatus | undefined {
    if (!this.running) return undefined;
    return {
      state: this.readiness(),
      stalled: [...this.stalled],
      consecutiveMisses: this.streak,
      lastOkAt: this.lastOkAt === 0 ? null : new Date(this.lastOkAt).toISOString(),
    };
  }

  private readiness(): SelfCheckStatus['state'] {
    if (this.streak >= this.opts.misses) return 'failing';
    return this.stalled.length > 0 ? 'degraded' : 'ok';
  }

  private schedule(ms: number): void {
    if (!this.running) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.tick(), ms);
    this.timer.unref();
  }

  private async tick(): Promise<void> {
    const began = Date.now();
    try {
      await this.check();
    } catch (err) {
      this.opts.log.warn({ err: (err as Error).message }, 'self-check failed to run');
    }
    this.schedule(Math.max(0, began + this.opts.intervalMs - Date.now()));
  }

  /** One check: a marker followed through its path, judged and reported; resolves with its misses.
   * The timer's (bench/experiments/self-check.ts calls it directly, with the timer set far off). */
  async check(): Promise<Miss[]> {
    if (this.writing !== undefined) {
      // The last marker's commit has still not returned: that is this check's answer too.
      await this.record(undefined, ['commit']);
      return ['commit'];
    }
    const run = new MarkerRun(this.opts.feed, `${this.prefix}${++this.seq}`);
    this.run = run;
    try {
      await run.follow(this.opts.db, this.opts.boundMs);
    } finally {
      this.run = undefined;
    }
    if (!this.running) return [];
    const code = (run.error as { code?: string } | undefined)?.code;
    if (code !== undefined && CANNOT_WRITE.has(code)) {
      this.stop();
      this.opts.log.info(
        { err: run.error?.message, code },
        'self-check off: this deployment cannot write to the feed (set SELF_CHECK_INTERVAL=0 to say so)',
      );
      return [];
    }
    if (run.times.commit === undefined && run.error === undefined) {
      const write = run.write.finally(() => {
        if (this.writing === write) this.writing = undefined;
      });
      this.writing = write;
    }
    const missed = judge(run, this.opts.boundMs, this.opts.feed.tailer.horizonStallMs > 0);
    await this.record(run, missed);
    return missed;
  }

  /** Counts the check, moves the readiness state and logs what changed. */
  private async record(run: MarkerRun | undefined, missed: Miss[]): Promise<void> {
    const { stats, opts } = this;
    stats.checks++;
    for (const s of STAGES) {
      const ms = run?.times[s];
      // A stage not reached within the bound shows the bound: it took at least that.
      stats.seconds[s] = (ms !== undefined && ms <= opts.boundMs ? ms : opts.boundMs) / 1000;
    }
    for (const m of missed) stats.misses[m]++;
    this.stalled = missed;
    if (missed.includes('tail_read') || missed.includes('hub')) this.streak++;
    else if (run?.times.hub !== undefined) this.streak = 0;
    if (missed.length === 0) {
      this.lastOkAt = Date.now();
      if (this.missedChecks > 0) {
        opts.log.info({ missedChecks: this.missedChecks }, 'self-check passed again: delivery recovered');
      }
      this.missedChecks = 0;
      return;
    }
    this.missedChecks++;
    await this.logMiss(run, missed);
  }

  private async logMiss(run: MarkerRun | undefined, missed: Miss[]): Promise<void> {
    // The line names the stage that matters most: a deaf listener alone still leaves the poll.
    const stage = missed.find((m) => m !== 'wake') ?? 'wake';
    const ms = Object.fromEntries(STAGES.map((s) => [s, roundMs(run?.times[s])]));
    const fields: Record<string, unknown> = {
      stage,
      stalled: missed,
      marker: run?.cursor && formatCursor(run.cursor, this.opts.feed.history.tag),
      ms,
      boundMs: this.opts.boundMs,
      readiness: this.readiness(),
      err: run?.error?.message,
    };
    if (stage === 'horizon') {
      const b = await horizonBlocker(this.opts.db).catch(() => undefined);
      fields.blocker = b && {
        pid: b.pid,
        applicationName: b.applicationName,
        transactionAgeS: Math.round(b.ageSeconds),
      };
    }
    this.opts.log.warn(fields, missMessage(stage, run, formatMs(this.opts.boundMs)));
  }

  registerMetrics(m: Metrics): void {
    if (this.opts.intervalMs === 0) return;
    const { stats } = this;
    m.counter(
      'commitfeed_selfcheck_checks_total',
      'Self-check markers this process followed',
      () => stats.checks,
    );
    m.counters(
      'commitfeed_selfcheck_misses_total',
      'Self-checks that missed a stage within SELF_CHECK_BOUND, by stage: commit, wake (LISTEN), tail_read, hub, horizon (held back by an open transaction)',
      ['stage'],
      (add) => {
        for (const s of MISSES) add({ stage: s }, stats.misses[s]);
      },
    );
    m.gauges(
      'commitfeed_selfcheck_stage_seconds',
      "The last self-check's time from the marker's write to each stage (the bound for a stage it did not reach)",
      ['stage'],
      (set) => {
        for (const s of STAGES) if (stats.seconds[s] !== undefined) set({ stage: s }, stats.seconds[s]);
      },
      'max',
    );
    m.gauge(
      'commitfeed_selfcheck_last_ok_timestamp_seconds',
      'When a self-check last passed every stage (Unix time; 0: none yet)',
      () => this.lastOkAt / 1000,
      'min',
    );
  }
}

/** The stages a run missed: nothing past an uncommitted marker can be judged; the wake is judged on
 * its own (the tailer is poked either way). */
function judge(run: MarkerRun, boundMs: number, horizonStalled: boolean): Miss[] {
  const seen = (s: Stage) => (run.times[s] ?? Number.POSITIVE_INFINITY) <= boundMs;
  if (!seen('commit')) return ['commit'];
  const missed: Miss[] = [];
  if (!seen('wake')) missed.push('wake');
  if (!seen('tail_read')) missed.push(horizonStalled ? 'horizon' : 'tail_read');
  else if (!seen('hub')) missed.push('hub');
  return missed;
}

const roundMs = (ms: number | undefined) => (ms === undefined ? null : Math.round(ms * 10) / 10);

/** The warning for a check's most telling miss: what stalled, and where to look. */
function missMessage(stage: Miss, run: MarkerRun | undefined, bound: string): string {
  const committed = `self-check marker committed in ${roundMs(run?.times.commit)} ms`;
  switch (stage) {
    case 'commit':
      if (run === undefined) {
        return 'self-check: the previous marker has still not committed (commit stalled: its insert into commitfeed.feed waits — look for locks on the feed in pg_locks, a stalled disk or WAL flush, or synchronous replication waiting for a standby; publishes wait the same way)';
      }
      if (run.error !== undefined) {
        return 'self-check: the marker could not be written (commit failed: is the database reachable? publishes fail the same way)';
      }
      return `self-check marker not committed after ${bound} (commit stalled: its insert into commitfeed.feed waits — look for locks on the feed in pg_locks, a stalled disk or WAL flush, or synchronous replication waiting for a standby; publishes wait the same way)`;
    case 'wake':
      return `${committed}, not heard by the listener after ${bound} (wake stalled: NOTIFY not reaching this process's LISTEN connection — behind a transaction-mode pooler, or a half-dead connection? Other processes' events arrive only by the POLL_INTERVAL poll)`;
    case 'tail_read':
      return `${committed}, not read by the tailer after ${bound} (tail read stalled: the feed's tail read is not completing — look for 'feed read failed' warnings, locks on commitfeed.feed or commitfeed.trim_mark, or a lagging standby; this process delivers nothing live meanwhile)`;
    case 'horizon':
      return `${committed}, still behind the horizon after ${bound} (an open writing transaction holds every reader back; delivery resumes when it ends, nothing is lost: end or cancel that backend if it is stuck. Every replica waits alike, so /readyz stays up)`;
    case 'hub':
      return `${committed} and read by the tailer, not fanned out by the hub after ${bound} (hub stalled: a page's fan-out failed — see 'feed read failed' warnings; live subscribers of this process may have missed that page's events)`;
  }
}
