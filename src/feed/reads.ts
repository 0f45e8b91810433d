/**
 * Where the feed's reads run: the primary, or the streaming hot standbys of READ_DATABASE_URL. The
 * tailer's tail reads and every catch-up page (SSE and JSON; of streams, stream globs and Mercure
 * topics) go to a standby; writes, LISTEN, the janitor, queues, start positions, trim marks and
 * Mercure's id lookups stay on the primary.
 *
 * Two things make a standby read safe:
 * - A standby never receives NOTIFY, and a wake means "a commit happened on the primary". A woken
 *   tail read first takes the primary's flushed WAL position (which a commit has reached before its
 *   NOTIFY is sent), then, on the standby connection it will read with, waits until
 *   pg_last_wal_replay_lsn() is past it: the read's snapshot then holds the waking commit. One cheap
 *   query per step, backing off up to 50 ms, and bounded by READ_LAG_WAIT: then the read goes to the
 *   primary. Wakes that arrive meanwhile coalesce in the tailer, so a lagging standby costs one
 *   primary query per tail read, never a poll per wake.
 * - A catch-up page must hold every event up to its upper bound (a position the tailer reached,
 *   perhaps on another standby, or the primary's horizon for read-your-writes). The page's statement
 *   also returns its snapshot's xmin (the standby's own horizon: on a standby, transactions the
 *   primary has not finished in the replayed WAL count as running, verified on a real standby), and
 *   the page is kept only when that horizon is past the bound; otherwise it is read again after a
 *   short pause, and from the primary once READ_LAG_WAIT is spent. So a standby that is behind,
 *   restarted (it reopens at an older replay position) or another standby than the tailer's never
 *   makes a reader skip an event, and since the cursor only moves past rows handed out, never repeat one.
 *
 * Lifecycle: start() probes every standby once, then every second (its replay position against the
 * primary's, for /metrics and /readyz, and to bring a lagging or unreachable standby back). States:
 * `ok` (reads go to it, round robin), `lagging` (a read waited READ_LAG_WAIT in vain), `down` (a
 * query failed), `promoted` (no longer in recovery: a promoted standby or a server that was never
 * one; never used again by this process, as it no longer follows the primary). Every change of state
 * is logged with the lag in bytes. A failed standby read is retried on the primary at once; a failed
 * primary read fails as it would without standbys.
 */
import { CompiledQuery, type Kysely } from 'kysely';
import { isUnavailable } from '../db/commit-outcome.ts';
import type { Database, Db } from '../db/database.ts';
import type { Cursor } from './cursor.ts';

export type StandbyState = 'ok' | 'lagging' | 'down' | 'promoted';

export interface StandbyDb {
  /** host:port/database (no credentials), for logs and metrics. */
  name: string;
  db: Kysely<Database>;
}

export interface StandbyStatus {
  name: string;
  state: StandbyState;
  /** WAL bytes the standby had yet to replay at the last probe (-1: unknown). */
  lagBytes: number;
  /** Reads it served. */
  reads: number;
}

export interface FeedReadsOptions {
  /** Where tail reads on the primary run (default: the primary pool). */
  tailPrimary?: Db;
  /** Longest a read waits for a standby to replay what it needs before it goes to the primary. */
  lagWaitMs: number;
  probeIntervalMs?: number;
  log: { warn(obj: object, msg?: string): void; info(obj: object, msg?: string): void };
}

interface Standby extends StandbyDb {
  state: StandbyState;
  lagBytes: number;
  reads: number;
  /** Where the primary was when a read marked this standby lagging: it serves again only once it has
   * replayed that far (a paused standby that had replayed the previous probe's position is not back). */
  mustReach?: string;
}

const PRIMARY_LSN_SQL = 'select pg_current_wal_flush_lsn()::text as lsn';
const REPLAY_SQL = `select pg_is_in_recovery() as standby,
  coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false) as reached,
  coalesce(pg_wal_lsn_diff($1::pg_lsn, pg_last_wal_replay_lsn()), -1)::float8 as behind`;
const MAX_PAUSE_MS = 50;

/** The later of two WAL positions ('16/B374D848'); b may be absent. */
export function laterLsn(a: string, b: string | undefined): string {
  if (b === undefined) return a;
  const n = (lsn: string) => {
    const [hi, lo] = lsn.split('/');
    return (BigInt(`0x${hi}`) << 32n) + BigInt(`0x${lo}`);
  };
  return n(b) > n(a) ? b : a;
}

/** A page's statement saw every event up to `upTo`: its snapshot's xmin (`horizon`) is past the
 * transaction of `upTo` (or, for a horizon position `(x, 0)`, at least `x`). */
export function horizonCovers(horizon: number, upTo: Cursor): boolean {
  return horizon > upTo.txid || (upTo.id === 0 && horizon >= upTo.txid);
}

export class FeedReads {
  private readonly standbys: Standby[];
  private turn = 0;
  private timer: NodeJS.Timeout | undefined;
  /** The primary's WAL position at the previous probe: a standby past it is less than a probe behind. */
  private lastPrimaryLsn: string | undefined;
  /** Reads served by a standby, by the primary while standbys are configured, and the tail reads that
   * waited for a standby's replay. */
  readonly stats = { standby: 0, primary: 0, fallbacks: 0, replayWaits: 0 };

  constructor(
    private readonly primary: Db,
    standbys: readonly StandbyDb[],
    private readonly opts: FeedReadsOptions,
  ) {
    this.standbys = standbys.map((s) => ({ ...s, state: 'down', lagBytes: -1, reads: 0 }));
  }

  get configured(): boolean {
    return this.standbys.length > 0;
  }

  status(): StandbyStatus[] {
    return this.standbys.map((s) => ({ name: s.name, state: s.state, lagBytes: s.lagBytes, reads: s.reads }));
  }

  async start(): Promise<void> {
    if (!this.configured) return;
    await this.probe();
    this.schedule();
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  /**
   * The tailer's read. `woken`: a commit may have happened on the primary since the last read (a
   * NOTIFY or a local commit); the standby must then have replayed the primary's WAL position taken
   * now. A timer read (idle poll, re-poll behind the horizon) reads whatever the standby has.
   */
  async tail<T>(woken: boolean, read: (db: Db) => Promise<T>): Promise<T> {
    const s = this.pick();
    if (!s) return this.onPrimary(read, this.opts.tailPrimary);
    // Outside the try: a primary that cannot be asked fails this read (the tailer backs off) and is
    // not the standby's fault.
    const target = woken ? await this.primaryLsn() : undefined;
    try {
      if (target === undefined) {
        const r = await read(s.db);
        this.stats.standby++;
        s.reads++;
        return r;
      }
      const NOT_YET = Symbol('not yet');
      // One connection for the wait and the read: replay only moves forward on one server, while a
      // pool could hand the read a connection to a restarted standby that is behind again.
      const r = await s.db
        .connection()
        .execute(async (conn) => ((await this.waitForReplay(s, conn, target)) ? read(conn) : NOT_YET));
      if (r !== NOT_YET) {
        this.stats.standby++;
        s.reads++;
        return r as T;
      }
    } catch (err) {
      this.failed(s, err);
    }
    return this.onPrimary(read, this.opts.tailPrimary);
  }

  /**
   * A catch-up page up to `upTo` (a position the tailer reached, or a read-your-writes position): on
   * a standby, kept when the page's own horizon says its snapshot held every event up to `upTo`
   * (horizonCovers), else read again after a pause, then on the primary.
   */
  async range<T extends { horizon: number }>(upTo: Cursor, read: (db: Db) => Promise<T>): Promise<T> {
    const s = this.pick();
    if (!s) return this.onPrimary(read);
    const deadline = Date.now() + this.opts.lagWaitMs;
    try {
      for (let pause = 1; ; pause = Math.min(pause * 2, MAX_PAUSE_MS)) {
        const r = await read(s.db);
        if (horizonCovers(r.horizon, upTo)) {
          this.stats.standby++;
          s.reads++;
          return r;
        }
        const left = deadline - Date.now();
        if (left <= 0) {
          s.mustReach = await this.primaryLsn().catch(() => this.lastPrimaryLsn);
          this.setState(s, 'lagging', 'standby is behind the position a read needs');
          break;
        }
        await new Promise((resolve) => setTimeout(resolve, Math.min(pause, left)));
      }
    } catch (err) {
      this.failed(s, err);
    }
    return this.onPrimary(read);
  }

  private onPrimary<T>(read: (db: Db) => Promise<T>, db: Db = this.primary): Promise<T> {
    if (this.configured) {
      this.stats.primary++;
      this.stats.fallbacks++;
    }
    return read(db);
  }

  /** The next standby in state `ok`, round robin; undefined: read on the primary. */
  private pick(): Standby | undefined {
    for (let i = 0; i < this.standbys.length; i++) {
      const s = this.standbys[(this.turn + i) % this.standbys.length];
      if (s.state === 'ok') {
        this.turn = (this.turn + i + 1) % this.standbys.length;
        return s;
      }
    }
    return undefined;
  }

  private async primaryLsn(): Promise<string> {
    const { rows } = await this.primary.executeQuery<{ lsn: string }>(CompiledQuery.raw(PRIMARY_LSN_SQL, []));
    return rows[0].lsn;
  }

  /** True once `conn`'s server has replayed `target`; false after READ_LAG_WAIT or on a promoted server. */
  private async waitForReplay(s: Standby, conn: Db, target: string): Promise<boolean> {
    const deadline = Date.now() + this.opts.lagWaitMs;
    for (let pause = 1; ; pause = Math.min(pause * 2, MAX_PAUSE_MS)) {
      const { rows } = await conn.executeQuery<{ standby: boolean; reached: boolean; behind: number }>(
        CompiledQuery.raw(REPLAY_SQL, [target]),
      );
      const r = rows[0];
      if (!r.standby) {
        this.setState(s, 'promoted', 'read server is not in recovery (promoted, or not a standby)');
        return false;
      }
      if (r.reached) return true;
      s.lagBytes = Math.max(0, r.behind);
      const left = deadline - Date.now();
      if (left <= 0) {
        s.mustReach = target;
        this.setState(
          s,
          'lagging',
          `standby has not replayed the waking commit after ${this.opts.lagWaitMs} ms`,
        );
        return false;
      }
      this.stats.replayWaits++;
      await new Promise((resolve) => setTimeout(resolve, Math.min(pause, left)));
    }
  }

  private failed(s: Standby, err: unknown): void {
    const message = (err as Error)?.message ?? String(err);
    if (isUnavailable(err)) this.setState(s, 'down', `standby read failed: ${message}`);
    // Other errors (a query cancelled by a conflict with replay): this read only goes to the primary.
    else
      this.opts.log.warn({ standby: s.name, err: message }, 'standby read failed; read again on the primary');
  }

  private setState(s: Standby, state: StandbyState, why: string): void {
    if (s.state === state || s.state === 'promoted') return;
    const was = s.state;
    s.state = state;
    const fields = { standby: s.name, state, was, lagBytes: s.lagBytes, why };
    if (state === 'ok') this.opts.log.info(fields, 'standby serves reads again');
    else
      this.opts.log.warn(
        fields,
        `standby ${state} (${s.lagBytes} bytes behind): its reads go to the primary`,
      );
  }

  private schedule(): void {
    this.timer = setTimeout(() => {
      void this.probe().finally(() => {
        if (this.timer) this.schedule();
      });
    }, this.opts.probeIntervalMs ?? 1000);
    this.timer.unref();
  }

  /** Measures each standby's lag against the primary; brings back a standby less than a probe behind. */
  private async probe(): Promise<void> {
    let now: string;
    try {
      now = await this.primaryLsn();
    } catch {
      return; // the primary is down: nothing to compare with (reads fail as they would without standbys)
    }
    const previous = this.lastPrimaryLsn ?? now;
    this.lastPrimaryLsn = now;
    await Promise.all(
      this.standbys.map(async (s) => {
        if (s.state === 'promoted') return;
        try {
          const { rows } = await s.db.executeQuery<{ standby: boolean; reached: boolean; behind: number }>(
            CompiledQuery.raw(REPLAY_SQL, [now]),
          );
          const r = rows[0];
          if (!r.standby) {
            this.setState(s, 'promoted', 'read server is not in recovery (promoted, or not a standby)');
            return;
          }
          s.lagBytes = Math.max(0, r.behind);
          if (s.state === 'ok') return;
          // Caught up to where the primary was one probe ago (close enough to serve reads again) and
          // to where it was when a read found this standby behind.
          const back = await s.db.executeQuery<{ reached: boolean }>(
            CompiledQuery.raw(REPLAY_SQL, [laterLsn(previous, s.mustReach)]),
          );
          const reached = back.rows[0].reached;
          if (reached) s.mustReach = undefined;
          this.setState(s, reached ? 'ok' : 'lagging', 'probe');
        } catch (err) {
          s.lagBytes = -1;
          this.setState(s, 'down', `standby probe failed: ${(err as Error).message}`);
        }
      }),
    );
  }
}
