/**
 * The SSE frame of a Mercure update (draft-08 §Subscription, §Publication `data`): `id:` (the
 * update's id), `event:` when it has a type, `retry:` when it has one, then one `data:` line per line
 * of its data (split on CR, LF or CRLF) and a blank line. Ids, types and topics can hold no control
 * character (refused at publish), and data cannot escape its `data:` lines, so no field can be
 * injected. Empty or absent data still sends `data: ` (an event without data never fires).
 *
 * Built in JavaScript from the feed row's `data` (see StoredUpdate) once per event and cached beside
 * it, whoever receives it.
 */
import type { FeedEvent } from '../feed/event.ts';
import type { MercureIds } from './ids.ts';

/** An update as the hub reads it from a feed row (updateOf). */
export interface StoredUpdate {
  topics: string[];
  id: string;
  private: boolean;
  retry: number | null;
  data: string | null;
}

/**
 * The feed row's `data`: {"topics", "id", "private", "retry", "data"} as written before change 3
 * (bench/HISTORY.md, "Mercure publish cost"; such rows stay readable), now without what is implied:
 * no `id` when the hub generated it (the row's position, encrypted: ids.ts), no `private` when false, no
 * `retry` when null. A smaller row, and no id index entry for generated ids.
 */
interface StoredForm {
  topics: string[];
  id?: string;
  private?: boolean;
  retry?: number | null;
  data: string | null;
}

/** The internal stream every update is written to (not a valid native name: see feed/validate.ts). */
export const MERCURE_STREAM = 'mercure/updates';

const parsed = new WeakMap<FeedEvent, StoredUpdate>();
const frames = new WeakMap<FeedEvent, string>();

/** The update a feed row of MERCURE_STREAM holds (parsed once per event); `ids`: the feed's. */
export function updateOf(e: FeedEvent, ids: MercureIds): StoredUpdate {
  let u = parsed.get(e);
  if (u === undefined) {
    const s = JSON.parse(e.data) as StoredForm;
    u = {
      topics: s.topics,
      id: s.id ?? ids.idOf(e.txid, e.id),
      private: s.private === true,
      retry: s.retry ?? null,
      data: s.data ?? null,
    };
    parsed.set(e, u);
  }
  return u;
}

/** The SSE frame of an update (built once per event). */
export function mercureFrame(e: FeedEvent, ids: MercureIds): string {
  let f = frames.get(e);
  if (f === undefined) {
    f = buildFrame(updateOf(e, ids), e.type);
    frames.set(e, f);
  }
  return f;
}

export function buildFrame(u: StoredUpdate, type: string | null): string {
  let f = `id: ${u.id}\n`;
  if (type !== null) f += `event: ${type}\n`;
  if (u.retry !== null) f += `retry: ${u.retry}\n`;
  const data = u.data ?? '';
  for (const line of data.split(/\r\n|\r|\n/)) f += `data: ${line}\n`;
  return `${f}\n`;
}
