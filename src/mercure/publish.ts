/**
 * Publishing Mercure updates (draft-08 §Publication): the checks of a publish form, in the order the
 * route applies them (400 for a malformed update, 413 over a limit), and the writes. Every write stores
 * the same rows: HTTP publishes as feed events (updateEvent) through the feed's group commit (one
 * statement and one notify per group, native publishes and updates together, held for the tailer
 * like them: src/feed/own-writes.ts); the library function, the /v1/tx op and the hub's own updates
 * inside the caller's transaction through the SQL function commitfeed.mercure_append
 * (src/sql/mercure-append.sql), which restates these checks for callers that reach the database
 * directly. Both end in commitfeed.append_plain.
 */
import { CompiledQuery } from 'kysely';
import type { Db } from '../db/database.ts';
import { parseCursor } from '../feed/cursor.ts';
import type { CheckedEventInput, EventFields, UpdateLookup } from '../feed/event.ts';
import { prepared } from '../db/prepared.ts';
import { ApiError } from '../errors.ts';
import { type FormPair, hasForbiddenChars } from './form.ts';
import { MERCURE_STREAM } from './frames.ts';
import type { MercureIds } from './ids.ts';

/** One update. `topics[0]` is the canonical topic, the rest are alternates. */
export interface MercureUpdate {
  topics: string[];
  data: string | null;
  private: boolean;
  /** null: the hub generates one (urn:uuid). */
  id: string | null;
  type: string | null;
  /** Reconnection delay for subscribers, in ms (the SSE `retry` field). */
  retry: number | null;
}

/** The hub's path: topics resolving into it are the hub's own (draft §Publication). */
export const HUB_PATH = '/.well-known/mercure';

export const LIMITS = {
  topics: 32,
  topicBytes: 2048,
  idChars: 1024,
  typeChars: 200,
  /** retry up to 10 digits (about 115 days); more is refused with 413. */
  retryDigits: 10,
};

/** The hub URL topics resolve against: MERCURE_RESOURCE, else this server's own address (as the
 * authorizer computes it). Only its path matters to the reserved-namespace rule. */
export function hubUrlFor(config: { mercureResource?: string; host: string; port: number }): string {
  return config.mercureResource ?? `http://${config.host}:${config.port}${HUB_PATH}`;
}

/** An update as the library and `/v1/tx` take it (JSON): `topic` is one topic or several. */
export interface UpdateInput {
  topic: string | string[];
  data?: string | null;
  private?: boolean;
  id?: string | null;
  type?: string | null;
  retry?: number | null;
}

/** Checks an UpdateInput's shape (400 naming `where`) and rules; returns the update. */
export function updateFromInput(
  input: unknown,
  hubUrl: string,
  maxDataBytes: number,
  where: string,
): MercureUpdate {
  const fail = (msg: string) => new ApiError(400, 'invalid_request', `${where}${msg}`);
  if (input === null || typeof input !== 'object' || Array.isArray(input)) {
    throw fail(' must be an object with "topic"');
  }
  const o = input as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (!['topic', 'data', 'private', 'id', 'type', 'retry'].includes(k)) {
      throw fail(` must NOT have additional property '${k}'`);
    }
  }
  const topics = typeof o.topic === 'string' ? [o.topic] : o.topic;
  if (!Array.isArray(topics) || !topics.every((t) => typeof t === 'string')) {
    throw fail('.topic must be a string or an array of strings');
  }
  const str = (k: string) => {
    const v = o[k];
    if (v !== undefined && v !== null && typeof v !== 'string') throw fail(`.${k} must be a string`);
    return (v as string | null | undefined) ?? null;
  };
  if (o.private !== undefined && typeof o.private !== 'boolean') throw fail('.private must be a boolean');
  if (o.retry !== undefined && o.retry !== null && !Number.isSafeInteger(o.retry)) {
    throw fail('.retry must be an integer (milliseconds)');
  }
  const id = str('id');
  const type = str('type');
  const update: MercureUpdate = {
    topics: topics as string[],
    data: str('data'),
    private: o.private === true,
    id: id === '' ? null : id,
    type: type === '' ? null : type,
    retry: (o.retry as number | null | undefined) ?? null,
  };
  try {
    validateUpdate(update, hubUrl, maxDataBytes, false);
  } catch (err) {
    if (err instanceof ApiError) throw new ApiError(err.statusCode, err.code, `${where}: ${err.message}`);
    throw err;
  }
  return update;
}

const UNRESERVED_PCT = /%(2[dDeE]|5[fF]|7[eE]|3[0-9]|[46][1-9a-fA-F]|[57][0-9aA])/g;

/** RFC 3986 §5.2.4 remove_dot_segments on an absolute path. */
function removeDotSegments(path: string): string {
  const out: string[] = [];
  const segs = path.split('/').slice(1);
  segs.forEach((seg, i) => {
    const last = i === segs.length - 1;
    if (seg === '.') {
      if (last) out.push('');
    } else if (seg === '..') {
      out.pop();
      if (last) out.push('');
    } else out.push(seg);
  });
  return `/${out.join('/')}`;
}

/**
 * True when `topic` addresses the hub's reserved namespace: resolved against the hub URL (WHATWG),
 * its path, with unreserved `%XX` decoded and dot segments removed, is the hub path or below it,
 * whatever the scheme or host. A topic that cannot be parsed is not reserved.
 */
export function reservedTopic(topic: string, hubUrl: string): boolean {
  let path: string;
  try {
    path = new URL(topic, hubUrl).pathname;
  } catch {
    return false;
  }
  if (!path.startsWith('/')) return false; // an opaque path (urn:…) names no hub path
  path = removeDotSegments(
    path.replace(UNRESERVED_PCT, (m) => String.fromCharCode(Number.parseInt(m.slice(1), 16))),
  );
  return path === HUB_PATH || path.startsWith(`${HUB_PATH}/`);
}

const bad = (code: string, message: string) => new ApiError(400, code, message);
const tooLarge = (message: string) => new ApiError(413, 'too_large', message);

/**
 * The update a publish form describes. Unknown fields are ignored (draft); for single-valued fields
 * the first occurrence counts. `maxDataBytes` bounds `data`.
 */
export function updateFromForm(
  pairs: readonly FormPair[],
  hubUrl: string,
  maxDataBytes: number,
): MercureUpdate {
  const topics: string[] = [];
  const first = new Map<string, string>();
  let isPrivate = false;
  for (const { name, value } of pairs) {
    if (name === 'topic') topics.push(value);
    else if (name === 'private')
      isPrivate = true; // its value MUST NOT be read: private=false is private
    else if (!first.has(name)) first.set(name, value);
  }
  const data = first.get('data');
  const id = first.get('id');
  const type = first.get('type');
  const retry = first.get('retry');
  const update: MercureUpdate = {
    topics,
    data: data ?? null,
    private: isPrivate,
    // An empty id counts as absent: an empty SSE `id:` would clear the browser's lastEventId.
    id: id === undefined || id === '' ? null : id,
    type: type === undefined || type === '' ? null : type,
    retry: null,
  };
  if (retry !== undefined && retry !== '') {
    if (!/^[0-9]+$/.test(retry))
      throw bad('invalid_retry', 'retry must be made of ASCII digits (milliseconds)');
    if (retry.replace(/^0+(?=.)/, '').length > LIMITS.retryDigits) {
      throw tooLarge(`retry is at most ${LIMITS.retryDigits} digits`);
    }
    update.retry = Number(retry);
  }
  validateUpdate(update, hubUrl, maxDataBytes, false);
  return update;
}

/**
 * The draft's rules for one update (400), then the hub's limits (413). `internal`: the hub's own
 * updates may use the reserved namespace and the type `mercure`.
 */
export function validateUpdate(
  u: MercureUpdate,
  hubUrl: string,
  maxDataBytes: number,
  internal: boolean,
): void {
  if (u.topics.length === 0) throw bad('missing_topic', 'an update needs at least one topic field');
  if (u.topics.length > LIMITS.topics) throw tooLarge(`an update has at most ${LIMITS.topics} topics`);
  for (const t of u.topics) {
    if (t === '*') throw bad('reserved_topic', 'the topic "*" is reserved for the wildcard matcher');
    if (Buffer.byteLength(t) > LIMITS.topicBytes)
      throw tooLarge(`a topic is at most ${LIMITS.topicBytes} bytes`);
    if (hasForbiddenChars(t)) {
      throw bad(
        'invalid_topic',
        `topic ${JSON.stringify(t.slice(0, 80))} contains control or format characters`,
      );
    }
    if (!internal && reservedTopic(t, hubUrl)) {
      throw bad(
        'reserved_topic',
        `topic ${JSON.stringify(t.slice(0, 80))} addresses the hub's reserved namespace (${HUB_PATH})`,
      );
    }
  }
  if (u.id !== null) {
    if (u.id.startsWith('#') || u.id === 'earliest') {
      throw bad('invalid_id', 'an id must not start with "#" nor be "earliest" (both are reserved)');
    }
    if (hasForbiddenChars(u.id))
      throw bad('invalid_id', 'an id must not contain control or format characters');
    if (u.id.length > LIMITS.idChars) throw tooLarge(`an id is at most ${LIMITS.idChars} characters`);
  }
  if (u.type !== null) {
    if (hasForbiddenChars(u.type))
      throw bad('invalid_type', 'a type must not contain control or format characters');
    if (u.type === 'mercure' && !internal) {
      throw bad('invalid_type', 'the type "mercure" is reserved for the hub\'s own updates');
    }
    if (u.type.length > LIMITS.typeChars) throw tooLarge(`a type is at most ${LIMITS.typeChars} characters`);
  }
  if (u.retry !== null && !(Number.isSafeInteger(u.retry) && u.retry >= 0 && u.retry <= 9_999_999_999)) {
    throw bad('invalid_retry', 'retry must be a whole number of milliseconds, 0 to 9999999999');
  }
  if (u.data !== null && Buffer.byteLength(u.data) > maxDataBytes) {
    throw tooLarge(`data is at most ${maxDataBytes} bytes (MAX_EVENT_BYTES)`);
  }
}

/**
 * An update checked by validateUpdate as a feed event for the group commit (the same statement,
 * notify and own-writes hold as native publishes): the hub's stream, its stored form as `data` (see
 * StoredForm in frames.ts: what commitfeed.mercure_append stores too), and its lookup (the id the
 * publisher gave, else null: a generated id is the row's position, ids.ts; its distinct topics).
 */
export function updateEvent(u: MercureUpdate): CheckedEventInput {
  let data = `{"topics":${JSON.stringify(u.topics)}`;
  if (u.id !== null) data += `,"id":${JSON.stringify(u.id)}`;
  if (u.private) data += ',"private":true';
  if (u.retry !== null) data += `,"retry":${u.retry}`;
  // A JSON string: U+0000 survives as \u0000 (PostgreSQL text cannot hold it).
  data += `,"data":${u.data === null ? 'null' : JSON.stringify(u.data)}}`;
  const topics = u.topics.length === 1 ? u.topics : [...new Set(u.topics)];
  const event: EventFields & { lookup: UpdateLookup } = {
    stream: MERCURE_STREAM,
    type: u.type,
    key: null,
    data,
    lookup: { mid: u.id, topics },
  };
  return event as CheckedEventInput;
}

/** The id of an update written at `cursor` (its append result's): its own, else the generated one. */
export function publishedId(u: MercureUpdate, cursor: string, ids: MercureIds): string {
  if (u.id !== null) return u.id;
  const at = parseCursor(cursor);
  if (at === undefined) throw new Error(`an append returned the cursor ${JSON.stringify(cursor)}`);
  return ids.idOf(at.txid, at.id);
}

export const MERCURE_APPEND_SQL = prepared(
  'select mid from commitfeed.mercure_append($1::text[], $2::int[], $3::json[], $4::boolean[], $5::text[], $6::text[], $7::int8[], $8::boolean)',
);

/** Stores updates in one statement (one notify); returns each one's id, in order. */
export async function appendUpdates(
  db: Db,
  updates: readonly MercureUpdate[],
  internal = false,
): Promise<string[]> {
  if (updates.length === 0) return [];
  const params = [
    updates.flatMap((u) => u.topics),
    updates.map((u) => u.topics.length),
    // JSON strings: U+0000 survives as \u0000 (PostgreSQL text cannot hold it).
    updates.map((u) => (u.data === null ? null : JSON.stringify(u.data))),
    updates.map((u) => u.private),
    updates.map((u) => u.id),
    updates.map((u) => u.type),
    updates.map((u) => (u.retry === null ? null : String(u.retry))),
    internal,
  ];
  const { rows } = await db.executeQuery<{ mid: string }>(CompiledQuery.raw(MERCURE_APPEND_SQL, params));
  if (rows.length !== updates.length) {
    throw new Error(`commitfeed.mercure_append returned ${rows.length} ids for ${updates.length} updates`);
  }
  return rows.map((r) => r.mid);
}
