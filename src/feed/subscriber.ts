/**
 * A subscriber: one SSE connection's place in the feed. It is either live (at the tail: the hub
 * writes new events to it as the tailer reads them, hub.ts) or catching up (its own paged reads until
 * it reaches the tail, catch-up.ts). Its bytes go to a Sink; a connection that chooses its own events
 * (stream globs, Mercure topics) brings a Selection.
 *
 * Lifecycle: made by Hub.subscribe and ended by Hub.unsubscribe (`closed`); what it holds between
 * the two is its cursor and at most one page of frames (`pending`, or a catch-up page being written).
 */
import type { FramesRead } from './catch-up-reads.ts';
import type { Cursor } from './cursor.ts';
import type { FeedEvent } from './event.ts';
import { namesStreams } from './frames.ts';

/** Where a subscriber's bytes go (an SSE response). */
export interface Sink {
  /** False when the buffer is full: stop writing until `drained()` resolves. */
  write(chunk: string): boolean;
  /** Resolves on `drain` or when the sink closes. */
  drained(): Promise<void>;
  end(chunk?: string): void;
  /** Drops the connection at once (a subscriber that stopped reading). */
  destroy?(): void;
  /** Bytes written but not yet taken by the socket. */
  buffered?(): number;
}

/**
 * A subscriber that chooses its own events (the Mercure hub's topic matchers, native stream
 * globs): it is offered every event of its streams (of every stream with `allStreams`), keeps those
 * `accepts` takes, frames them its own way, and catches up with its own reader. The hand-over, the
 * backpressure and the slow-subscriber rules are the hub's, as for any subscriber.
 */
export interface Selection {
  readonly allStreams?: boolean;
  accepts(e: FeedEvent): boolean;
  frame(e: FeedEvent): string;
  readPage(after: Cursor, limit: number, chunkBytes: number): Promise<FramesRead>;
  /** Retention dropped events past the cursor during catch-up: a chunk to write (and whether to end
   * the stream with it), or undefined to go on from the mark silently (the selection tells its
   * client in its own way). */
  onReset(mark: Cursor): { chunk: string; end: boolean } | undefined;
}

export class Subscriber {
  live = false;
  closed = false;
  pumping = false;
  /** Frames gathered for this subscriber during one fan-out. */
  pending = '';
  /** When a write last found the socket full (0: not blocked). Read by the slow-subscriber sweep. */
  blockedSince = 0;
  /** The sink's unsent bytes at the last sweep: a client that is taking bytes is slow, not stuck. */
  lastBuffered = 0;
  readonly streamSet: ReadonlySet<string>;
  /** Its frames name their stream (a connection to several streams: see frames.ts). */
  readonly named: boolean;

  constructor(
    readonly streams: readonly string[],
    public cursor: Cursor,
    readonly sink: Sink,
    readonly selection?: Selection,
  ) {
    this.streamSet = new Set(streams);
    this.named = namesStreams(streams);
  }
}
