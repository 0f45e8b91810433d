/**
 * Per-queue activity for the live page: this process's queue counters (enqueued, claimed, acked,
 * dead-lettered), differenced per tick into rates, beside each queue's depth from the tables.
 */
import type { QueueStats } from '../queues/admin.ts';
import type { QueueCounters } from '../queues/counters.ts';

/** One queue at one tick: depth from the tables, activity (per second) from this process. */
export type QueueSample = Pick<QueueStats, 'name' | 'paused' | 'ready' | 'delayed' | 'leased' | 'dead'> & {
  /** Seconds the oldest claimable job has waited. */
  oldestReadyS: number;
  enqueued: number;
  claimed: number;
  acked: number;
  deadLettered: number;
};

/** A queue's counts, or their rates per second over one tick. */
export interface QueueActivity {
  enqueued: number;
  claimed: number;
  acked: number;
  dead: number;
}

/** The counters' totals at the last tick, to difference the next one against. */
export class QueueRates {
  private readonly prev = new Map<string, QueueActivity>();

  constructor(private readonly counters: QueueCounters) {}

  /** Starts from the totals as they are now. */
  start(): void {
    for (const [q, c] of this.counters.byQueue) this.prev.set(q, queueTotals(c));
  }

  /** Per-queue activity since the last tick, per second (`perS`: ticks per second). */
  tick(perS: number): Map<string, QueueActivity> {
    const activity = new Map<string, QueueActivity>();
    for (const [q, c] of this.counters.byQueue) {
      const cur = queueTotals(c);
      const was = this.prev.get(q) ?? { enqueued: 0, claimed: 0, acked: 0, dead: 0 };
      activity.set(q, {
        enqueued: (cur.enqueued - was.enqueued) * perS,
        claimed: (cur.claimed - was.claimed) * perS,
        acked: (cur.acked - was.acked) * perS,
        dead: (cur.dead - was.dead) * perS,
      });
      this.prev.set(q, cur);
    }
    return activity;
  }
}

function queueTotals(c: { enqueued: number; claimed: number; acked: number; deadLettered: number }) {
  return { enqueued: c.enqueued, claimed: c.claimed, acked: c.acked, dead: c.deadLettered };
}

export function queueSample(q: QueueStats, a: QueueActivity | undefined): QueueSample {
  return {
    name: q.name,
    paused: q.paused,
    ready: q.ready,
    delayed: q.delayed,
    leased: q.leased,
    dead: q.dead,
    oldestReadyS: q.oldestReadyAgeSeconds,
    enqueued: a?.enqueued ?? 0,
    claimed: a?.claimed ?? 0,
    acked: a?.acked ?? 0,
    deadLettered: a?.dead ?? 0,
  };
}
