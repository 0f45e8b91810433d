/**
 * Slow readers: what an SSE connection that reads slowly, or not at all, may cost, and when it is
 * dropped. Its cost is its bytes in flight: what the service wrote and the client has not
 * acknowledged, in Node (the response's unsent bytes) and in the kernel (the socket's send queue,
 * read from /proc/net/tcp by send-queues.ts). Node cannot cap the kernel's share (SO_SNDBUF needs a
 * native addon; on loopback one stalled socket took 3.8 MiB), and a fan-out writes a page to
 * every subscriber in one tick (2,000 stalled sockets took 1.2 GiB before a sweep could look), so
 * writes are budgeted here, and the sweep that measures what is in flight grants the next budgets:
 *
 * - each subscriber may be written `budget` bytes until the next sweep: its allowance less what it
 *   has in flight. The allowance is SSE_MAX_IN_FLIGHT_BYTES for a new one and for one that
 *   acknowledges at least that much per second (then plus four seconds of its pace); for a slower one,
 *   two seconds of its pace, within a quarter of the cap and the cap. All of them together stop at
 *   SSE_MAX_TOTAL_IN_FLIGHT_BYTES in flight. A subscriber stopped by a budget (`admit` false) is out
 *   of the live set until a sweep grants more (`granted`), then catches up from its cursor, as after
 *   a full socket. A refused write brings the next sweep forward (at most one per MIN_GAP_MS) when
 *   all connections are at the total, or the subscriber is new or fast; a slow one waits for the
 *   next regular sweep, so a thousand slow readers cost no more sweeps than one.
 * - a sweep drops, with a TCP RST (the kernel frees the queue at once), a subscriber
 *   `timeout`: stuck (its socket full, or on hold with its own budget spent) for
 *   SLOW_SUBSCRIBER_TIMEOUT;
 *   `in_flight`: all of its allowance in flight (a quarter of SSE_MAX_IN_FLIGHT_BYTES at least) while
 *   it is not reading (it acknowledged less than 1/16 of the cap per second, and less than half of
 *   what it had in flight at the last sweep);
 *   `total`: over 3/4 of the total in flight, every one that is not reading, then the most in
 *   flight until the rest is under it, leaving room for the readers that keep up.
 * Every frame a client received carries its id, so it resumes with Last-Event-ID and loses nothing.
 *
 * Lifecycle: one per hub. Sweeps run on an unref'd interval (a quarter of the timeout, at most 1 s)
 * and read the kernel's tables only while SSE connections exist; one runs at a time. `stop()` ends
 * the timers and releases every subscriber waiting for a grant.
 */
import { SendQueues } from './send-queues.ts';
import type { Subscriber } from './subscriber.ts';

export const DROP_REASONS = ['timeout', 'in_flight', 'total'] as const;
export type DropReason = (typeof DROP_REASONS)[number];

export interface SlowReaderLimits {
  /** SLOW_SUBSCRIBER_TIMEOUT: longest a subscriber may stay stuck. */
  slowMs: number;
  /** SSE_MAX_IN_FLIGHT_BYTES: per connection. */
  maxInFlight: number;
  /** SSE_MAX_TOTAL_IN_FLIGHT_BYTES: across all SSE connections of the process. */
  maxTotalInFlight: number;
}

export interface SlowReadersOptions extends SlowReaderLimits {
  subscribers(): ReadonlySet<Subscriber>;
  /** Ends the subscriber in the hub and resets its connection. */
  drop(sub: Subscriber, reason: DropReason): void;
  log: { warn(obj: object, msg?: string): void };
}

/** An early sweep waits at least this long after the last one (bounds its cost under pressure). */
const MIN_GAP_MS = 50;
/** Drops named one by one in a sweep's log line; the rest are counted. */
const LOGGED = 3;
const NONE = new Map<number, number>();

type Drop = { sub: Subscriber; reason: DropReason; queued: number };

export class SlowReaders {
  readonly stats = {
    dropped: { timeout: 0, in_flight: 0, total: 0 } as Record<DropReason, number>,
    /** Bytes in flight (Node + kernel) of the connections kept by the last sweep. */
    inFlight: 0,
    /** The kernel's share of `inFlight`. */
    kernelQueued: 0,
    sweeps: 0,
    /** Wall time spent in sweeps: reading the kernel's tables and judging every connection. */
    sweepSeconds: 0,
    /** Writes put off by a budget (the subscriber caught up after a grant). */
    deferred: 0,
  };
  /** Bytes written to subscribers since the last sweep. */
  private written = 0;
  private lastAt = 0;
  private running = false;
  private peak = 0;
  private current: Promise<void> = Promise.resolve();
  private again: Promise<void> | undefined;
  private readonly everyMs: number;
  private readonly timer: NodeJS.Timeout;
  private early: NodeJS.Timeout | undefined;
  private readonly kernel: SendQueues;
  private readonly waiting = new Map<Subscriber, () => void>();

  constructor(private readonly opts: SlowReadersOptions) {
    this.kernel = new SendQueues(opts.log);
    this.everyMs = Math.max(25, Math.min(1000, opts.slowMs >>> 2));
    this.timer = setInterval(() => void this.sweep(), this.everyMs);
    this.timer.unref();
  }

  /** Gives a new subscriber its first allowance (SSE_MAX_IN_FLIGHT_BYTES), until its first sweep. */
  enroll(sub: Subscriber): void {
    sub.allowance = this.opts.maxInFlight;
    sub.budget = this.opts.maxInFlight;
  }

  /** The most bytes in flight a sweep measured (dropped subscribers' included) since the last call. */
  takePeak(): number {
    const peak = this.peak;
    this.peak = 0;
    return peak;
  }

  /** Has `sub` a budget left (and all connections room)? */
  ready(sub: Subscriber): boolean {
    return sub.sent < sub.budget && this.stats.inFlight + this.written < this.opts.maxTotalInFlight;
  }

  /** May `bytes` be written to `sub` now? True counts them; false puts the subscriber on hold. */
  admit(sub: Subscriber, bytes: number): boolean {
    if (this.ready(sub)) {
      sub.sent += bytes;
      this.written += bytes;
      return true;
    }
    if (sub.gatedSince === 0) sub.gatedSince = Date.now();
    this.stats.deferred++;
    if (sub.fast || this.stats.inFlight + this.written >= this.opts.maxTotalInFlight) this.soon();
    return false;
  }

  /** Resolves once a sweep grants `sub` a budget again, or it is closed or dropped. */
  granted(sub: Subscriber): Promise<void> {
    return new Promise((resolve) => {
      const before = this.waiting.get(sub);
      this.waiting.set(
        sub,
        before
          ? () => {
              before();
              resolve();
            }
          : resolve,
      );
    });
  }

  /** Measures every subscriber, drops the ones the rules name, and grants the next budgets; one
   * asked for while another runs follows it. */
  sweep(): Promise<void> {
    if (this.running) {
      this.again ??= this.current.then(() => {
        this.again = undefined;
        return this.sweep();
      });
      return this.again;
    }
    this.current = this.run();
    return this.current;
  }

  private async run(): Promise<void> {
    this.running = true;
    clearTimeout(this.early);
    this.early = undefined;
    const started = performance.now();
    try {
      const subs = this.opts.subscribers();
      let queues: Map<number, number> | undefined;
      if (subs.size > 0) {
        let ipv6 = false;
        for (const sub of subs) if (sub.sink.socketId?.().ipv6) ipv6 = true;
        queues = await this.kernel.read(ipv6);
      }
      this.judge(queues ?? NONE, Date.now());
      this.grant();
    } finally {
      this.running = false;
      this.stats.sweeps++;
      this.stats.sweepSeconds += (performance.now() - started) / 1000;
    }
  }

  stop(): void {
    clearInterval(this.timer);
    clearTimeout(this.early);
    for (const resolve of this.waiting.values()) resolve();
    this.waiting.clear();
  }

  /** Brings the next sweep forward (MIN_GAP_MS after the last at the earliest). */
  private soon(): void {
    if (this.early !== undefined || this.running) return;
    this.early = setTimeout(
      () => {
        this.early = undefined;
        void this.sweep();
      },
      Math.max(0, this.lastAt + MIN_GAP_MS - Date.now()),
    );
    this.early.unref();
  }

  private judge(queues: ReadonlyMap<number, number>, now: number): void {
    const { slowMs, maxTotalInFlight } = this.opts;
    const seconds = this.lastAt === 0 ? 0 : (now - this.lastAt) / 1000;
    this.lastAt = now;
    this.written = 0;
    const drops: Drop[] = [];
    const behind: { sub: Subscriber; queued: number; reading: boolean }[] = [];
    let total = 0;
    let kernel = 0;
    let measured = 0;
    for (const sub of this.opts.subscribers()) {
      const allowance = sub.allowance; // what it was given at the last sweep
      const { queued, reading } = this.measure(sub, queues, seconds);
      measured += sub.inFlight;
      // On hold counts as stuck only while its own budget is spent: not while only the total (or a
      // late sweep: a busy event loop) held it.
      const held = sub.budget > 0 ? 0 : sub.gatedSince;
      const stuck = Math.min(sub.blockedSince || now, held || now);
      if (now - stuck >= slowMs) drops.push({ sub, reason: 'timeout', queued });
      else if (sub.inFlight >= allowance && !reading) drops.push({ sub, reason: 'in_flight', queued });
      else {
        total += sub.inFlight;
        kernel += queued;
        if (sub.inFlight > 0) behind.push({ sub, queued, reading });
      }
    }
    // Over 3/4 of the total: every one that is not reading goes, then the most in flight.
    const room = (maxTotalInFlight * 3) / 4;
    if (total > room) {
      behind.sort((a, b) => Number(a.reading) - Number(b.reading) || b.sub.inFlight - a.sub.inFlight);
      for (const { sub, queued, reading } of behind) {
        if (total <= room && reading) break;
        total -= sub.inFlight;
        kernel -= queued;
        drops.push({ sub, reason: 'total', queued });
      }
    }
    this.peak = Math.max(this.peak, measured);
    this.stats.inFlight = total;
    this.stats.kernelQueued = kernel;
    if (drops.length > 0) this.dropAll(drops, now);
  }

  /**
   * Takes a subscriber's measures (bytes in flight, acknowledged; `queued`: the kernel's share) and
   * grants its next budget. It is `reading` when it acknowledged 1/16 of the cap per second, or half
   * of what it had in flight at the last sweep (a new one, with nothing before, is).
   */
  private measure(
    sub: Subscriber,
    queues: ReadonlyMap<number, number>,
    seconds: number,
  ): { queued: number; reading: boolean } {
    const { maxInFlight } = this.opts;
    const inode = sub.sink.socketId?.().inode ?? 0;
    const queued = inode > 0 ? (queues.get(inode) ?? 0) : 0;
    const bytes = sub.sink.socketBytes?.();
    const inFlight = queued + (bytes?.unsent ?? sub.sink.buffered?.() ?? 0);
    const acked = bytes === undefined ? undefined : bytes.handed - queued;
    const progress = acked === undefined || sub.acked === undefined ? Number.NaN : acked - sub.acked;
    // Bytes per second the client acknowledged since the last sweep (NaN: not known).
    const rate = seconds === 0 ? Number.NaN : progress / seconds;
    const reading = Number.isNaN(progress) || !(rate < maxInFlight / 16) || progress >= sub.inFlight / 2;
    sub.acked = acked;
    sub.rate = rate;
    sub.inFlight = inFlight;
    sub.sent = 0;
    sub.fast = !(rate < maxInFlight);
    // A sink that cannot tell what is in flight: only the total holds it.
    sub.allowance = acked === undefined ? Number.POSITIVE_INFINITY : this.allowance(rate);
    sub.budget = Math.max(0, sub.allowance - inFlight);
    return { queued, reading };
  }

  /** What a subscriber acknowledging `rate` bytes per second may have in flight (see the header). */
  private allowance(rate: number): number {
    const cap = this.opts.maxInFlight;
    const second = (rate * this.everyMs) / 1000;
    if (!(rate < cap)) return Number.isNaN(rate) ? cap : cap + 4 * second;
    return Math.min(cap, Math.max(cap / 4, 2 * second));
  }

  /** Releases the subscribers on hold that may be written again (or that are gone). */
  private grant(): void {
    const open = this.stats.inFlight < this.opts.maxTotalInFlight;
    // The ones acknowledging fastest first: whoever catches up first takes the room.
    const waiting = [...this.waiting].sort(([a], [b]) => (b.rate || 0) - (a.rate || 0));
    for (const [sub, resolve] of waiting) {
      if (!sub.closed && !(open && sub.sent < sub.budget)) continue;
      this.waiting.delete(sub);
      sub.gatedSince = 0;
      resolve();
    }
  }

  private dropAll(drops: Drop[], now: number): void {
    const reasons: Partial<Record<DropReason, number>> = {};
    for (const { sub, reason } of drops) {
      this.stats.dropped[reason]++;
      reasons[reason] = (reasons[reason] ?? 0) + 1;
      this.opts.drop(sub, reason);
    }
    this.opts.log.warn(
      {
        dropped: drops.length,
        reasons,
        freedBytes: drops.reduce((n, d) => n + d.sub.inFlight, 0),
        inFlightBytes: this.stats.inFlight,
        first: drops.slice(0, LOGGED).map(({ sub, reason, queued }) => ({
          reason,
          streams: sub.streams.slice(0, 5),
          cursor: `${sub.cursor.txid}-${sub.cursor.id}`,
          inFlight: sub.inFlight,
          kernelQueued: queued,
          stuckMs: now - Math.min(sub.blockedSince || now, (sub.budget > 0 ? 0 : sub.gatedSince) || now),
        })),
      },
      'slow SSE subscribers dropped with a reset (each resumes from its last id)',
    );
  }
}
