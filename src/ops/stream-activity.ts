/**
 * Per-stream activity for the live page's streams view, from the events the tailer reads: a ring of
 * 60 per-tick counts per stream (rates over a sliding window, the last minute), the last event's
 * time and the types seen. Bounded: MAX_STREAMS streams, MAX_TYPES types each.
 */
import type { FeedEvent } from '../feed/event.ts';
import type { StreamStats } from '../streams/queries.ts';

/** A user stream as the streams view shows it (internal streams, `queue/...` and the like, are not kept). */
export interface StreamRow {
  name: string;
  /** Events per second over the last `RATE_WINDOW_S` seconds. */
  perS: number;
  lastMinute: number;
  /** Epoch ms of the last event seen (null: none since start and none found at start). */
  lastAt: number | null;
  types: string[];
}

export const RATE_WINDOW_S = 10;
const MINUTE = 60;
const MAX_TYPES = 32;
const MAX_STREAMS = 5000;

interface StreamRec {
  name: string;
  /** Events per tick, slot = tick % 60; slots of ticks after `lastTick` are stale (read as 0). */
  slots: Uint32Array;
  lastTick: number;
  lastAt: number | null;
  types: Set<string>;
}

export class StreamActivity {
  private readonly streams = new Map<string, StreamRec>();
  /** The current, still-filling tick. */
  private tick = 0;

  constructor(private readonly intervalMs: number) {}

  /** Streams written before this process started, with their last event time and types. */
  seed(streams: readonly Pick<StreamStats, 'name' | 'lastEventAt' | 'types'>[]): void {
    for (const s of streams) {
      if (isInternal(s.name)) continue;
      const rec = this.rec(s.name);
      if (rec && s.lastEventAt) rec.lastAt = Math.max(rec.lastAt ?? 0, Date.parse(s.lastEventAt));
      for (const t of s.types) if (rec && rec.types.size < MAX_TYPES) rec.types.add(t);
    }
  }

  /** Counts one event the tailer read in the current tick. */
  count(e: FeedEvent): void {
    if (isInternal(e.stream)) return;
    const rec = this.rec(e.stream);
    if (!rec) return;
    this.bump(rec);
    rec.lastAt = e.ms;
    if (e.type !== null && rec.types.size < MAX_TYPES) rec.types.add(e.type);
  }

  /** Ends the current tick. */
  advance(): void {
    this.tick++;
  }

  /** User streams by recent activity (busiest first, then most recent). */
  rows(): StreamRow[] {
    const rows: StreamRow[] = [];
    for (const r of this.streams.values()) {
      rows.push({
        name: r.name,
        perS: this.sum(r, RATE_WINDOW_S) / ((RATE_WINDOW_S * this.intervalMs) / 1000),
        lastMinute: this.sum(r, MINUTE),
        lastAt: r.lastAt,
        types: [...r.types],
      });
    }
    return rows.sort((a, b) => b.perS - a.perS || (b.lastAt ?? 0) - (a.lastAt ?? 0) || cmp(a.name, b.name));
  }

  private rec(name: string): StreamRec | undefined {
    let r = this.streams.get(name);
    if (!r) {
      if (this.streams.size >= MAX_STREAMS) return undefined;
      r = { name, slots: new Uint32Array(MINUTE), lastTick: this.tick, lastAt: null, types: new Set() };
      this.streams.set(name, r);
    }
    return r;
  }

  /** Counts one event in the current tick's slot, clearing slots left stale since the last one. */
  private bump(r: StreamRec): void {
    if (r.lastTick !== this.tick) {
      for (let k = r.lastTick + 1; k <= this.tick && k <= r.lastTick + MINUTE; k++) r.slots[k % MINUTE] = 0;
      r.lastTick = this.tick;
    }
    r.slots[this.tick % MINUTE]++;
  }

  /** Events in the last `n` completed ticks (the current, still-filling tick excluded). */
  private sum(r: StreamRec, n: number): number {
    let total = 0;
    for (let k = this.tick - n; k < this.tick; k++) {
      if (k < 0 || k > r.lastTick || k <= r.lastTick - MINUTE) continue;
      total += r.slots[k % MINUTE];
    }
    return total;
  }
}

/** Internal streams (queue wake-ups, Mercure's updates, the self-check's markers) have a '/' in their
 * name, which user stream names cannot. */
function isInternal(stream: string): boolean {
  return stream.includes('/');
}

const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
