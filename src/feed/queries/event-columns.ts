/**
 * An event as the feed's reads select it, and the row they hand back: shared by every statement that
 * reads events (the tail, the catch-up ranges, the glob and Mercure topic pages).
 */
import { type FeedEvent, feedEvent } from '../event.ts';

/** A row of a page of events: the event's columns, its position as text, `ms` its created_at. */
export interface Row {
  txid: string;
  id: string;
  stream: string;
  type: string | null;
  key: string | null;
  data: string;
  ms: number;
}

export function toEvent(r: Row): FeedEvent {
  return feedEvent(r.txid, r.id, r, r.ms);
}

/** A feed row `f` as the tail and catch-up reads select it (see Row). */
export const EVENT_COLUMNS =
  'f.txid, f.id, f.stream, f.type, f.key, f.data, extract(epoch from f.created_at)::float8 * 1000 as ms';

/** What a page over EVENT_COLUMNS (a lateral `p`) returns after the position: json as text (not parsed). */
export const PAGE_COLUMNS = 'p.stream, p.type, p.key, p.data::text as data, p.ms';
