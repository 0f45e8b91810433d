/**
 * The rules of names, event types and keys, shared by the HTTP routes, the transaction endpoint and
 * the library API: toEventInput (event.ts) applies them to an event, src/queues/validate.ts to a job.
 * The SQL functions (src/sql/) restate them for callers that reach the database directly, and
 * test/validation-parity.test.ts checks that both sides accept and refuse the same inputs.
 */
import { ApiError } from '../errors.ts';
import { NAME_PATTERN } from './names.ts';

const NAME_RE = new RegExp(NAME_PATTERN);
/** Event types become SSE `event:` fields: no line breaks or control characters. */
export const TYPE_PATTERN = '^[^\\u0000-\\u001f\\u007f]{1,200}$';
// `u`: lengths count characters (code points), as the route schemas (ajv) and the SQL functions do.
const TYPE_RE = new RegExp(TYPE_PATTERN, 'u');
/** With the `u` flag only an unpaired surrogate matches: text that is not well-formed Unicode. */
const LONE_SURROGATE = /\p{Cs}/u;
/** Longest key, in characters (code points, as PostgreSQL's char_length and JSON schema's maxLength count). */
export const KEY_MAX_LENGTH = 200;

/** Length in characters (code points); `.length` counts UTF-16 units. */
function codePoints(s: string): number {
  let n = 0;
  for (const _ of s) n++;
  return n;
}

/** The API's 400 for input its schema would refuse. */
export const invalid = (message: string) => new ApiError(400, 'invalid_request', message);

/** A stream or queue name (`what` says which). */
export function assertName(name: unknown, what = 'stream'): asserts name is string {
  if (typeof name !== 'string' || !NAME_RE.test(name)) {
    throw new ApiError(
      400,
      'invalid_name',
      `${what} name must be 1-200 characters of letters, digits and . _ : - (got ${JSON.stringify(name)?.slice(0, 80)})`,
    );
  }
}

/** An event type, when given; `where` names the event in the message. */
export function assertType(type: unknown, where: string): asserts type is string | undefined {
  if (type !== undefined && (typeof type !== 'string' || !TYPE_RE.test(type) || LONE_SURROGATE.test(type))) {
    throw invalid(`${where}.type must be 1-200 characters without control characters`);
  }
}

/** An idempotency key (events and jobs) or a job's group (`field`), when given; `where` names the event or job in the message. */
export function assertKey(key: unknown, where: string, field = 'key'): asserts key is string | undefined {
  if (
    key !== undefined &&
    (typeof key !== 'string' ||
      key.length < 1 ||
      // Up to 200 UTF-16 units is at most 200 code points: count only longer keys.
      (key.length > KEY_MAX_LENGTH && codePoints(key) > KEY_MAX_LENGTH) ||
      // PostgreSQL text cannot hold NUL, and a lone surrogate would be stored as U+FFFD (two
      // different keys colliding).
      key.includes('\u0000') ||
      LONE_SURROGATE.test(key))
  ) {
    throw invalid(
      `${where}.${field} must be a string of 1-${KEY_MAX_LENGTH} characters (no NUL, well-formed Unicode)`,
    );
  }
}
