/**
 * The shape of an event read from the feed, shared by the readers (queries, window, tailer) and the
 * writers of frames (frames, hub). It lives apart from queries.ts so that frames.ts, which the
 * queries embed as SQL, does not import them back.
 */
import type { Cursor } from './cursor.ts';

/** An event read from the feed. `frame` caches its SSE frame, built once for every subscriber. */
export interface FeedEvent extends Cursor {
  cursor: string;
  stream: string;
  type: string | null;
  key: string | null;
  data: string;
  /** created_at, epoch milliseconds */
  ms: number;
  frame?: string;
  /** The frame for connections to several streams (its id names the stream), built on first use. */
  namedFrame?: string;
}

/** One event to append. `data` is JSON text (one line), stored and served back byte for byte. */
export interface EventInput {
  stream: string;
  type: string | null;
  key: string | null;
  data: string;
}

declare const checked: unique symbol;
/** An event toEventInput() accepted: only such events may skip the SQL checks (appendCheckedEvents). */
export type CheckedEventInput = EventInput & { readonly [checked]: true };

/** An event at (`tx`, `id`) (their decimal texts) with `e`'s contents: a row read, or one held (own-writes.ts). */
export function feedEvent(tx: string, id: string, e: EventInput, ms: number): FeedEvent {
  return {
    txid: Number(tx),
    id: Number(id),
    cursor: `${tx}-${id}`,
    stream: e.stream,
    type: e.type,
    key: e.key,
    data: e.data,
    ms,
  };
}
