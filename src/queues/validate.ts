/**
 * One definition of what a valid job is, shared by the HTTP routes, the transaction endpoint and the
 * library API. The route schemas check the same rules first (for OpenAPI and early 400s); these checks
 * stand on their own for callers that do not come through HTTP.
 */
import { ApiError } from '../errors.ts';
import { assertKey, assertName } from '../feed/validate.ts';
import type { CheckedJobInput } from './enqueue.ts';

export const DEFAULT_MAX_ATTEMPTS = 5;
export const MAX_ATTEMPTS_LIMIT = 1000;
/** Longest delay, lease, backoff or extension accepted, in seconds (one year). */
export const MAX_SECONDS = 365 * 24 * 3600;
export const PRIORITY_LIMIT = 1_000_000;
export const DEFAULT_BACKOFF = { type: 'exponential', delay: 1, max: 3600, jitter: true } as const;

export interface Backoff {
  type?: 'exponential' | 'fixed';
  /** Seconds before the first retry (fixed: before every retry). */
  delay?: number;
  /** Longest wait between retries, in seconds. */
  max?: number;
  /** Randomise each wait to 50–100% of its value (default true), so failures do not retry in step. */
  jitter?: boolean;
}

/** The JSON body of one job, as accepted by the API. */
export interface JobBody {
  payload: unknown;
  delay?: number;
  runAt?: string;
  priority?: number;
  key?: string;
  maxAttempts?: number;
  backoff?: Backoff;
  /** Ordered group: its jobs are handed out one at a time, in enqueue order. */
  group?: string;
}

const bad = (message: string) => new ApiError(400, 'invalid_request', message);

function seconds(v: unknown, what: string, min = 0): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > MAX_SECONDS) {
    throw bad(`${what} must be a number of seconds from ${min} to ${MAX_SECONDS}`);
  }
  return v;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** Checks one job and turns it into a row to enqueue; `where` names it in error messages. */
export function toJobInput(
  queue: string,
  body: JobBody,
  maxPayloadBytes: number,
  where = 'job',
): CheckedJobInput {
  assertName(queue, 'queue');
  if (!isObject(body)) throw bad(`${where} must be a JSON object with a "payload" property`);
  if (!('payload' in body) || body.payload === undefined) {
    throw bad(`${where} must have required property 'payload'`);
  }
  const delay = body.delay === undefined ? 0 : seconds(body.delay, `${where}.delay`);
  let runAt: string | null = null;
  if (body.runAt !== undefined) {
    const ms = typeof body.runAt === 'string' ? Date.parse(body.runAt) : Number.NaN;
    if (Number.isNaN(ms)) throw bad(`${where}.runAt must be an ISO 8601 date-time`);
    if (body.delay !== undefined) throw bad(`${where}: give either delay or runAt, not both`);
    runAt = new Date(ms).toISOString();
  }
  const priority = body.priority ?? 0;
  if (!Number.isInteger(priority) || Math.abs(priority) > PRIORITY_LIMIT) {
    throw bad(`${where}.priority must be an integer from -${PRIORITY_LIMIT} to ${PRIORITY_LIMIT}`);
  }
  assertKey(body.key, where);
  assertKey(body.group, where, 'group');
  const maxAttempts = body.maxAttempts ?? DEFAULT_MAX_ATTEMPTS;
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1 || maxAttempts > MAX_ATTEMPTS_LIMIT) {
    throw bad(`${where}.maxAttempts must be an integer from 1 to ${MAX_ATTEMPTS_LIMIT}`);
  }
  const b = body.backoff ?? {};
  if (!isObject(b)) throw bad(`${where}.backoff must be an object`);
  if (b.type !== undefined && b.type !== 'exponential' && b.type !== 'fixed') {
    throw bad(`${where}.backoff.type must be "exponential" or "fixed"`);
  }
  if (b.jitter !== undefined && typeof b.jitter !== 'boolean')
    throw bad(`${where}.backoff.jitter must be a boolean`);
  const backoff = {
    type: b.type ?? DEFAULT_BACKOFF.type,
    delay: b.delay === undefined ? DEFAULT_BACKOFF.delay : seconds(b.delay, `${where}.backoff.delay`),
    max: b.max === undefined ? DEFAULT_BACKOFF.max : seconds(b.max, `${where}.backoff.max`),
    jitter: b.jitter ?? DEFAULT_BACKOFF.jitter,
  };
  const payload = JSON.stringify(body.payload);
  // Cheap bound first: a UTF-16 length can be at most 3 UTF-8 bytes per unit.
  if (payload.length * 3 > maxPayloadBytes && Buffer.byteLength(payload) > maxPayloadBytes) {
    throw new ApiError(413, 'payload_too_large', `${where}.payload is larger than ${maxPayloadBytes} bytes`);
  }
  return {
    queue,
    payload,
    priority,
    delay,
    runAt,
    key: body.key ?? null,
    maxAttempts,
    backoff: JSON.stringify(backoff),
    group: body.group ?? null,
  } as CheckedJobInput;
}
