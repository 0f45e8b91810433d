/**
 * One definition of what a valid event is, shared by the HTTP routes, the transaction endpoint and
 * the library API (the SQL functions enforce the same rules in SQL).
 */
import { ApiError } from '../http/errors.ts';
import type { EventInput } from './queries.ts';

/** Stream and queue names: 1–200 characters of [A-Za-z0-9._:-]. */
export const NAME_PATTERN = '^[A-Za-z0-9._:-]{1,200}$';
const NAME_RE = new RegExp(NAME_PATTERN);
/** Event types become SSE `event:` fields: no line breaks or control characters. */
export const TYPE_PATTERN = '^[^\\u0000-\\u001f\\u007f]{1,200}$';
// `u`: lengths count characters (code points), as the route schemas (ajv) and commitfeed.append do.
const TYPE_RE = new RegExp(TYPE_PATTERN, 'u');
/** With the `u` flag only an unpaired surrogate matches: text that is not well-formed Unicode. */
const LONE_SURROGATE = /\p{Cs}/u;

/** Length in characters (code points); `.length` counts UTF-16 units. */
function codePoints(s: string): number {
  let n = 0;
  for (const _ of s) n++;
  return n;
}

export function assertName(name: unknown, what = 'stream'): asserts name is string {
  if (typeof name !== 'string' || !NAME_RE.test(name)) {
    throw new ApiError(
      400,
      'invalid_name',
      `${what} name must be 1-200 characters of letters, digits and . _ : - (got ${JSON.stringify(name)?.slice(0, 80)})`,
    );
  }
}

/** The JSON body of one event, as accepted by the API. */
export interface EventBody {
  data: unknown;
  type?: string;
  key?: string;
}

/** Checks one event and turns it into a row to append; `where` names it in error messages. */
export function toEventInput(
  stream: string,
  body: EventBody,
  maxEventBytes: number,
  where = 'event',
): EventInput {
  assertName(stream);
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new ApiError(400, 'invalid_request', `${where} must be a JSON object with a "data" property`);
  }
  if (!('data' in body) || body.data === undefined) {
    throw new ApiError(400, 'invalid_request', `${where} must have required property 'data'`);
  }
  if (
    body.type !== undefined &&
    (typeof body.type !== 'string' || !TYPE_RE.test(body.type) || LONE_SURROGATE.test(body.type))
  ) {
    throw new ApiError(
      400,
      'invalid_request',
      `${where}.type must be 1-200 characters without control characters`,
    );
  }
  if (
    body.key !== undefined &&
    (typeof body.key !== 'string' ||
      body.key.length < 1 ||
      (body.key.length > 200 && codePoints(body.key) > 200) ||
      // PostgreSQL text cannot hold NUL, and a lone surrogate would be stored as U+FFFD (two
      // different keys colliding).
      body.key.includes('\u0000') ||
      LONE_SURROGATE.test(body.key))
  ) {
    throw new ApiError(
      400,
      'invalid_request',
      `${where}.key must be a string of 1-200 characters (no NUL, well-formed Unicode)`,
    );
  }
  const data = JSON.stringify(body.data);
  // Cheap bound first: a UTF-16 length can be at most 3 UTF-8 bytes per unit.
  if (data.length * 3 > maxEventBytes && Buffer.byteLength(data) > maxEventBytes) {
    throw new ApiError(413, 'event_too_large', `${where}.data is larger than ${maxEventBytes} bytes`);
  }
  return { stream, type: body.type ?? null, key: body.key ?? null, data };
}
