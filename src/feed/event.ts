/**
 * What an event is, said once: its fields, in the order they are stored, appended and read
 * (EVENT_FIELDS). Everything else that names them comes from this table: the TypeScript types below,
 * the request schema of a publish (EVENT_BODY_SCHEMA: the body of POST /v1/streams/{stream}/events
 * and of the publish op of POST /v1/tx), the checks of toEventInput, the JSON form of a read
 * (eventJson, EVENT_JSON_SCHEMA) and the SQL (queries/event-columns.ts: the columns a read selects,
 * the arrays an append passes). An SSE frame carries the type and the data only (frames.ts).
 *
 * Adding a field (an optional text, as `type` and `key` are) touches five files:
 * - here, a row at the end of EVENT_FIELDS, and a line in each of the three conversions below that
 *   run per event and so name the fields one by one (feedEvent and toEventInput, where the compiler
 *   asks for it, and eventJson);
 * - a migration that adds the column and drops the three append functions, whose arguments change;
 * - those functions in src/sql/ (append.sql, append-unchecked.sql, append-plain.sql), which take one
 *   array per field in this order: a new one last, with a default, so the SQL functions that call
 *   them (publish, enqueue) stay as they are.
 */
import { ApiError } from '../errors.ts';
import { type Cursor, cursorText } from './cursor.ts';
import { KEY_MAX_LENGTH, TYPE_PATTERN, assertKey, assertName, assertType, invalid } from './validate.ts';

/** A field a publisher may leave out (stored as null): its request schema and its check. */
interface TextField {
  kind: 'text';
  schema: { type: 'string'; description: string; pattern?: string; minLength?: number; maxLength?: number };
  /** Throws the API's 400 for a value the schema would refuse; `where` names the event. */
  check(value: unknown, where: string): void;
}

export const EVENT_FIELDS = {
  /** The stream: from the URL, or the `stream` of a transaction's publish op. */
  stream: { kind: 'stream' },
  /** The SSE event name (an `event:` line). */
  type: {
    kind: 'text',
    schema: { type: 'string', pattern: TYPE_PATTERN, description: 'SSE event name' },
    check: assertType,
  },
  /** Idempotency key, unique per stream: publishing it again appends nothing and returns the original. */
  key: {
    kind: 'text',
    schema: {
      type: 'string',
      minLength: 1,
      maxLength: KEY_MAX_LENGTH,
      description: 'idempotency key, unique per stream',
    },
    check: assertKey,
  },
  /** Any JSON value: stored as `json`, served back as the same text, byte for byte. */
  data: { kind: 'json' },
} as const satisfies Record<string, { kind: 'stream' } | { kind: 'json' } | TextField>;

type Fields = typeof EVENT_FIELDS;
export type FieldName = keyof Fields;
type TextFieldName = { [K in FieldName]: Fields[K]['kind'] extends 'text' ? K : never }[FieldName];

/** Every field, in EVENT_FIELDS order. */
export const FIELD_NAMES = Object.keys(EVENT_FIELDS) as FieldName[];
/** The fields a publisher may leave out, in EVENT_FIELDS order. */
export const TEXT_FIELD_NAMES = FIELD_NAMES.filter((f) => EVENT_FIELDS[f].kind === 'text') as TextFieldName[];

/** An event's contents as stored and read: every field (a text left out is null; `data` is JSON text). */
export type EventFields = {
  -readonly [K in FieldName]: Fields[K]['kind'] extends 'text' ? string | null : string;
};

/** One event to append. `data` is JSON text (one line), stored and served back byte for byte; a text
 * field left out is stored as null. */
export type EventInput = Omit<EventFields, TextFieldName> & Partial<Pick<EventFields, TextFieldName>>;

/**
 * What the feed stores beside a Mercure update (an event of the hub's stream, src/mercure/) so that
 * the hub can find it: its Mercure id (the feed's `mid` column, for resuming from Last-Event-ID) and
 * its distinct topics for exact-topic catch-up, the canonical one first (the feed's `topic` column;
 * the others are rows of commitfeed.mercure_topics).
 */
export interface UpdateLookup {
  /** The id its publisher gave (the `mid` column); null: the hub's generated id, its position. */
  mid: string | null;
  topics: readonly string[];
}

declare const checked: unique symbol;
/** An event toEventInput() accepted, or a Mercure update the hub checked (with its `lookup`): only
 * such events may skip the SQL checks (appendCheckedEvents). */
export type CheckedEventInput = EventFields & { readonly [checked]: true; readonly lookup?: UpdateLookup };

/** The JSON body of one event, as a publish accepts it (the stream comes from the URL or the op). */
export type EventBody = { data: unknown } & { [K in TextFieldName]?: string };

/** An event read from the feed. `frame` caches its SSE frame, built once for every subscriber. */
export interface FeedEvent extends Cursor, EventFields {
  cursor: string;
  /** created_at, epoch milliseconds */
  ms: number;
  frame?: string;
  /** The frame for connections to several streams (its id names the stream), built on first use. */
  namedFrame?: string;
}

/**
 * An event at (`tx`, `id`) (their decimal texts) with `e`'s contents: a row read, or one held
 * (own-writes.ts). `suffix`: the feed's tag as its cursors end (history.ts). Field by field rather
 * than a loop over EVENT_FIELDS: the tailer makes one per event it reads.
 */
export function feedEvent(tx: string, id: string, e: EventFields, ms: number, suffix = ''): FeedEvent {
  return eventAt(Number(tx), Number(id), cursorText(tx, id, suffix), e, ms);
}

/** feedEvent with the position's numbers and its cursor text already at hand (own-writes.ts makes
 * one per event this process publishes, and has them without parsing). */
export function eventAt(txid: number, id: number, cursor: string, e: EventFields, ms: number): FeedEvent {
  return {
    txid,
    id,
    cursor,
    stream: e.stream,
    type: e.type,
    key: e.key,
    data: e.data,
    ms,
  };
}

/** The request schema of one event (toEventInput makes the same checks where no schema guards the
 * input: the ops of /v1/tx, the library API). */
export const EVENT_BODY_SCHEMA = {
  type: 'object',
  required: ['data'],
  additionalProperties: false,
  properties: {
    data: { description: 'any JSON value' },
    ...Object.fromEntries(TEXT_FIELD_NAMES.map((f) => [f, EVENT_FIELDS[f].schema])),
  },
} as const;

/** The text fields' checks, in TEXT_FIELD_NAMES order. */
const CHECKS = TEXT_FIELD_NAMES.map((f) => EVENT_FIELDS[f].check);

/** Checks one event and turns it into a row to append; `where` names it in error messages. */
export function toEventInput(
  stream: string,
  body: EventBody,
  maxEventBytes: number,
  where = 'event',
): CheckedEventInput {
  assertName(stream);
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw invalid(`${where} must be a JSON object with a "data" property`);
  }
  if (!('data' in body) || body.data === undefined) {
    throw invalid(`${where} must have required property 'data'`);
  }
  for (let i = 0; i < CHECKS.length; i++) CHECKS[i](body[TEXT_FIELD_NAMES[i]], where);
  const data = JSON.stringify(body.data);
  // Cheap bound first: a UTF-16 length can be at most 3 UTF-8 bytes per unit.
  if (data.length * 3 > maxEventBytes && Buffer.byteLength(data) > maxEventBytes) {
    throw new ApiError(413, 'event_too_large', `${where}.data is larger than ${maxEventBytes} bytes`);
  }
  const event: EventFields = { stream, type: body.type ?? null, key: body.key ?? null, data };
  return event as CheckedEventInput;
}

const text = (value: string | null): string => (value === null ? 'null' : JSON.stringify(value));

/**
 * An event in a JSON read: its id, its fields, its time; `data` passed through as stored (no parse, no
 * re-serialise). Field by field, like feedEvent: it runs for every event of a JSON read (a loop over
 * EVENT_FIELDS cost ~10% more per event).
 */
export function eventJson(e: FeedEvent): string {
  return `{"id":"${e.cursor}","stream":${JSON.stringify(e.stream)},"type":${text(e.type)},"key":${text(e.key)},"data":${e.data},"time":"${new Date(e.ms).toISOString()}"}`;
}

/** The schema of eventJson's output (documentation: the reads write their JSON themselves). */
export const EVENT_JSON_SCHEMA = {
  type: 'object',
  properties: {
    id: { type: 'string', description: 'cursor: pass as `after` or `Last-Event-ID` to resume after it' },
    ...Object.fromEntries(
      FIELD_NAMES.map((f) => [
        f,
        EVENT_FIELDS[f].kind === 'json'
          ? { description: 'the event data as published' }
          : { type: EVENT_FIELDS[f].kind === 'text' ? ['string', 'null'] : 'string' },
      ]),
    ),
    time: { type: 'string', format: 'date-time' },
  },
} as const;
