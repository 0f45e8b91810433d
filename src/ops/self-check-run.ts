/**
 * One self-check marker followed along an event's path (self-check.ts says why): its write returns
 * (commit), this process's LISTEN connection hears its NOTIFY (wake), the tailer's position passes it
 * (tail read), the hub hands it to a listener (hub). Each stage's time is taken when it is first seen,
 * in milliseconds from the write's start.
 *
 * The marker is written as any process's write reaches this one: a row the tail read must really
 * read, then a poke of the tailer as every write path here gives after its commit. The NOTIFY is only
 * checked for being heard: the wake stage is what other processes' writes (and SQL publishes) rely
 * on, while a deaf listener still leaves the tail read to the poke and the poll.
 */
import { performance } from 'node:perf_hooks';
import type { Db } from '../db/database.ts';
import { type Cursor, compareCursors } from '../feed/cursor.ts';
import type { Feed } from '../feed/feed.ts';
import { MARKER_STREAM } from '../feed/marker.ts';
import { writeMarker } from '../feed/queries/write-marker.ts';

/** The stages of a marker's path, in order. */
export const STAGES = ['commit', 'wake', 'tail_read', 'hub'] as const;
export type Stage = (typeof STAGES)[number];

export class MarkerRun {
  /** Milliseconds from the write's start to each stage seen. */
  readonly times: Partial<Record<Stage, number>> = {};
  /** The marker's position, once committed. */
  cursor: Cursor | undefined;
  /** Why the write failed, if it did. */
  error: Error | undefined;
  /** The write, settled or not (a stalled commit outlives the run); never rejects. */
  write: Promise<void> = Promise.resolve();
  private readonly started = performance.now();
  /** The row's data: the hub stage knows its marker by what the tail read read back. */
  private readonly data: string;
  /** Ends the current wait early (a stage was seen). */
  private poke: (() => void) | undefined;
  private cancelled = false;

  constructor(
    private readonly feed: Feed,
    readonly payload: string,
  ) {
    this.data = JSON.stringify({ marker: payload });
  }

  /** The LISTEN connection heard a marker of this process's. */
  heard(payload: string): void {
    if (payload === this.payload) this.pass('wake');
  }

  /** Stops waiting for stages (shutdown). */
  cancel(): void {
    this.cancelled = true;
    this.poke?.();
  }

  /** Writes the marker, then waits until every stage is seen or `boundMs` from the start has passed. */
  async follow(db: Db, boundMs: number): Promise<void> {
    // Only for the run's few milliseconds: a listener keeps the hub from counting as idle (tailer.ts).
    const stopListening = this.feed.hub.listen(MARKER_STREAM, (e) => {
      if (e.data !== this.data) return;
      // The tailer hands the hub only what it has read.
      this.pass('tail_read');
      this.pass('hub');
    });
    try {
      this.write = writeMarker(db, this.data, this.payload).then(
        (cursor) => {
          this.cursor = cursor;
          this.pass('commit');
          this.feed.tailer.wake();
        },
        (err: Error) => {
          this.error = err;
          this.poke?.();
        },
      );
      await this.waitForStages(this.started + boundMs, boundMs);
    } finally {
      stopListening();
    }
  }

  private async waitForStages(deadline: number, boundMs: number): Promise<void> {
    // The tail read is also seen by the tailer's position, for a page the hub failed to fan out: it
    // is looked at every `step` (a few times per bound) while the hub has not reported the marker.
    const step = Math.min(100, Math.max(5, boundMs / 50));
    for (;;) {
      const { cursor } = this;
      if (cursor !== undefined && compareCursors(this.feed.tailer.position, cursor) >= 0) {
        this.pass('tail_read');
      }
      if (this.cancelled || this.error !== undefined) return;
      if (STAGES.every((s) => this.times[s] !== undefined)) return;
      const left = deadline - performance.now();
      if (left <= 0) return;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => this.poke?.(), Math.min(step, left));
        this.poke = () => {
          clearTimeout(timer);
          this.poke = undefined;
          resolve();
        };
      });
    }
  }

  private pass(stage: Stage): void {
    if (this.times[stage] !== undefined) return;
    this.times[stage] = performance.now() - this.started;
    this.poke?.();
  }
}
