/**
 * Where a Mercure subscriber starts (draft-08 §Reconciliation), resolved before the headers are sent
 * when the database answers in time, else on the open stream once it does (src/http/feed-sse.ts; the
 * stream is then primed with the id as given, and no Mercure-Last-Event-ID header is sent). The
 * `Last-Event-ID` header wins over the `last_event_id` query parameter.
 *
 * - none: the live tail (a position after every acknowledged update, as native `latest` starts), and
 *   the stream is primed with the id of the last update before it, so a client that drops before its
 *   first update resumes from there (`earliest` when no update is held);
 * - `earliest`: everything retention holds, `Mercure-Last-Event-ID: earliest`;
 * - a known id: after the earliest update bearing it (a reused id means its first use; later reuses
 *   are delivered), the header echoes it;
 * - an unknown or expired id (trimmed by retention, or never published): everything retention holds,
 *   with the header `earliest`, so a client reading the header sees the mismatch and one that does
 *   not (EventSource) gets duplicates rather than a silent gap. Never silent loss.
 */
import type { Db } from '../db/database.ts';
import { type Cursor, START } from '../feed/cursor.ts';
import type { Feed } from '../feed/feed.ts';
import { safePosition } from '../http/read-position.ts';
import type { MercureIds } from './ids.ts';
import { findUpdateId, lastUpdateId } from './queries.ts';

export interface ResumePoint {
  cursor: Cursor;
  /** The Mercure-Last-Event-ID header value (undefined: the request named no id). */
  header: string | undefined;
  /** The id the stream is primed with. */
  primedId: string;
  /** Started after a known id: a trim during catch-up ends the stream (see MercureSelection). */
  found: boolean;
}

export const EARLIEST = 'earliest';

export async function resolveResume(
  db: Db,
  feed: Feed,
  given: string | undefined,
  startWaitMs: number,
  ids: MercureIds,
): Promise<ResumePoint> {
  if (given === undefined) {
    const cursor = await safePosition(feed, startWaitMs);
    return {
      cursor,
      header: undefined,
      primedId: (await lastUpdateId(db, cursor, ids)) ?? EARLIEST,
      found: false,
    };
  }
  if (given !== EARLIEST && !given.startsWith('#')) {
    const at = await findUpdateId(db, given, ids);
    if (at !== undefined) return { cursor: at, header: given, primedId: given, found: true };
  }
  // `#…` ids are the hub's own fragment form, which this hub does not mint: unknown.
  return { cursor: START, header: EARLIEST, primedId: EARLIEST, found: false };
}

/** The resume value of a request: a non-empty Last-Event-ID header, else last_event_id. */
export function givenId(
  header: string | string[] | undefined,
  query: string | undefined,
): string | undefined {
  const h = Array.isArray(header) ? header[0] : header;
  if (h !== undefined && h !== '') return h;
  return query === undefined || query === '' ? undefined : query;
}
