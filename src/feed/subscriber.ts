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
  write(chunk: string | Uint8Array): boolean;
  /** Resolves on `drain` or when the sink closes. */
  drained(): Promise<void>;
  end(chunk?: string): void;
  /** Drops the connection at once with a TCP RST (a subscriber that stopped reading): the kernel
   * frees its send queue now instead of holding it through FIN_WAIT for a peer that never reads. */
  reset?(): void;
  /** Bytes written but not yet taken by the socket. */
  buffered?(): number;
  /** The socket's inode, to find its send queue in the kernel's tables (0: unknown), and whether
   * it is in the IPv6 table (slow-readers.ts). */
  socketId?(): { readonly inode: number; readonly ipv6: boolean };
  /** The socket's counts: `unsent`, bytes Node holds that the kernel has not taken; `handed`, bytes
   * the kernel has taken so far (acknowledged by the client, or still in its send queue). */
  socketBytes?(): { unsent: number; handed: number };
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
  /** Frames gathered for this subscriber during one fan-out, how many, and its cursor before them. */
  pending = '';
  pendingFrames = 0;
  pendingFrom: Cursor;
  pendingFirst: FeedEvent | undefined = undefined;
  /** When a write found the socket full, until it drains (0: not blocked). Read by the sweep. */
  blockedSince = 0;
  /** When its byte budget (or all connections') stopped a write, until a sweep grants more. */
  gatedSince = 0;
  /** The slow-reader sweep's accounts (slow-readers.ts): bytes in flight at the last sweep (Node's
   * unsent bytes plus the kernel's send queue), bytes the client had acknowledged by then
   * (undefined: its sink cannot tell), bytes written since, and how many it may be written. */
  inFlight = 0;
  acked: number | undefined = 0;
  /** Bytes per second it acknowledged between the last two sweeps (NaN: not known). */
  rate = Number.NaN;
  sent = 0;
  budget = Number.POSITIVE_INFINITY;
  allowance = Number.POSITIVE_INFINITY;
  /** New, or it acknowledged at least SSE_MAX_IN_FLIGHT_BYTES per second: worth an early sweep. */
  fast = true;
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
    this.pendingFrom = cursor;
  }
}
