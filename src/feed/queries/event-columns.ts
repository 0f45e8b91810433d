/**
 * An event in SQL, from its definition (EVENT_FIELDS in event.ts): the columns the feed's reads
 * select and the row they hand back (the tail, the catch-up ranges, the glob and Mercure topic
 * pages), and the arrays the append functions take.
 */
import {
  EVENT_FIELDS,
  type EventFields,
  type FeedEvent,
  type FieldName,
  FIELD_NAMES,
  feedEvent,
} from '../event.ts';

/** A row of a page of events: the event's fields, its position as text, `ms` its created_at. */
export type Row = EventFields & { txid: string; id: string; ms: number };

/** The event of a row; `suffix`: the feed's tag as its cursors end (history.ts). */
export function toEvent(r: Row, suffix = ''): FeedEvent {
  return feedEvent(r.txid, r.id, r, r.ms, suffix);
}

/** A feed row `f` as the tail and catch-up reads select it (see Row). */
export const EVENT_COLUMNS = `f.txid, f.id, ${FIELD_NAMES.map((f) => `f.${f}`).join(', ')}, extract(epoch from f.created_at)::float8 * 1000 as ms`;

/** What a page over EVENT_COLUMNS (a lateral `p`) returns after the position: json as text (not parsed). */
export const PAGE_COLUMNS = `${FIELD_NAMES.map((f) => (EVENT_FIELDS[f].kind === 'json' ? `p.${f}::text as ${f}` : `p.${f}`)).join(', ')}, p.ms`;

/** `$1::text[], $2::text[], ...`: an append function's arguments, one array per field of `fields`. */
export function arrayArgs(fields: readonly FieldName[]): string {
  return fields.map((f, i) => `$${i + 1}::${EVENT_FIELDS[f].kind === 'json' ? 'json' : 'text'}[]`).join(', ');
}
