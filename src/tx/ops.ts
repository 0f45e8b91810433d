/**
 * The operations of `POST /v1/tx`: each op is checked with the same validation as its own endpoint
 * (src/feed/validate.ts, src/queues/validate.ts), with errors naming the op
 * (`ops[3].publish.stream: ...`), before anything is written; then all ops run in one transaction
 * through the same writes as their own endpoints (appendEvents, enqueueJobs).
 */
import type { Kysely } from 'kysely';
import type { Database, Db } from '../db/database.ts';
import { ApiError } from '../errors.ts';
import type { Feed } from '../feed/feed.ts';
import {
  type CheckedEventInput,
  EVENT_BODY_SCHEMA,
  type EventBody,
  type EventInput,
  toEventInput,
} from '../feed/event.ts';
import { type AppendResult, appendEvents } from '../feed/queries/append.ts';
import { assertName } from '../feed/validate.ts';
import { type EnqueueResult, type JobInput, enqueueJobs } from '../queues/enqueue.ts';
import { HUB_PATH, type MercureUpdate, appendUpdates, updateFromInput } from '../mercure/publish.ts';
import { jobInput } from '../queues/schemas.ts';
import { type JobBody, toJobInput } from '../queues/validate.ts';

export const MAX_OPS = 1000;
export const OP_KINDS = ['publish', 'enqueue', 'mercure'] as const;

export type TxOp =
  | { kind: 'publish'; event: CheckedEventInput }
  | { kind: 'enqueue'; job: JobInput }
  | { kind: 'mercure'; update: MercureUpdate };
export type TxResult = { publish: AppendResult } | { enqueue: EnqueueResult } | { mercure: { id: string } };

// The fields of each op: its own endpoint's body, plus the stream or queue it goes to.
const PUBLISH_FIELDS = new Set(['stream', ...Object.keys(EVENT_BODY_SCHEMA.properties)]);
const ENQUEUE_FIELDS = new Set(['queue', ...Object.keys(jobInput.properties)]);

const isObject = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === 'object' && !Array.isArray(v);

/** Checks every op (throws a 400 naming the first bad one); nothing is written before this passes. */
export function parseOps(ops: readonly unknown[], maxBytes: number, hubUrl = DEFAULT_HUB_URL): TxOp[] {
  return ops.map((op, i) => parseOp(op, `ops[${i}]`, maxBytes, hubUrl));
}

// Only the path of the hub URL matters to a publish's checks (the reserved namespace).
const DEFAULT_HUB_URL = `http://localhost${HUB_PATH}`;

function parseOp(op: unknown, where: string, maxBytes: number, hubUrl: string): TxOp {
  const kinds = isObject(op) ? Object.keys(op) : [];
  if (!isObject(op) || kinds.length !== 1 || !(OP_KINDS as readonly string[]).includes(kinds[0])) {
    throw new ApiError(
      400,
      'invalid_request',
      `${where} must be an object with exactly one of ${OP_KINDS.map((k) => `"${k}"`).join(', ')}` +
        (kinds.length > 0 ? ` (got ${kinds.map((k) => JSON.stringify(k)).join(', ')})` : ''),
    );
  }
  if (kinds[0] === 'publish') {
    const { stream, ...event } = fields(
      op.publish,
      PUBLISH_FIELDS,
      `${where}.publish`,
      '"stream" and "data"',
    );
    checkName(stream, 'stream', `${where}.publish`);
    return {
      kind: 'publish',
      event: toEventInput(stream, event as unknown as EventBody, maxBytes, `${where}.publish`),
    };
  }
  if (kinds[0] === 'mercure') {
    return { kind: 'mercure', update: updateFromInput(op.mercure, hubUrl, maxBytes, `${where}.mercure`) };
  }
  const { queue, ...job } = fields(op.enqueue, ENQUEUE_FIELDS, `${where}.enqueue`, '"queue" and "payload"');
  checkName(queue, 'queue', `${where}.enqueue`);
  return { kind: 'enqueue', job: toJobInput(queue, job as unknown as JobBody, maxBytes, `${where}.enqueue`) };
}

function fields(
  body: unknown,
  allowed: Set<string>,
  where: string,
  required: string,
): Record<string, unknown> {
  if (!isObject(body))
    throw new ApiError(400, 'invalid_request', `${where} must be an object with ${required}`);
  for (const k of Object.keys(body)) {
    if (!allowed.has(k)) {
      throw new ApiError(400, 'invalid_request', `${where} must NOT have additional property '${k}'`);
    }
  }
  return body;
}

function checkName(name: unknown, what: 'stream' | 'queue', where: string): asserts name is string {
  try {
    assertName(name, what);
  } catch (err) {
    if (err instanceof ApiError)
      throw new ApiError(err.statusCode, err.code, `${where}.${what}: ${err.message}`);
    throw err;
  }
}

/**
 * Runs checked ops in one transaction: all commit or none do, and the feed is notified at commit.
 * Publish-only requests go through the group-commit batcher (their events are one appendEvents call,
 * already all-or-nothing), sharing a statement and a notify with concurrent publishes.
 */
export async function runOps(
  deps: { db: Kysely<Database>; feed: Feed },
  ops: readonly TxOp[],
): Promise<TxResult[]> {
  if (ops.every((op) => op.kind === 'publish')) {
    const results = await deps.feed.batcher.publish(ops.map((op) => op.event));
    return results.map((r) => ({ publish: r }));
  }
  const results = await deps.db.transaction().execute((trx) => runInTransaction(trx, ops));
  // Our own commit: read now rather than wait for the NOTIFY to come back. (commitfeed.append's
  // cursors carry the feed's tag already, as the batcher's results do.)
  deps.feed.tailer.wake();
  return results;
}

/**
 * Runs ops in `trx`, in order; consecutive ops of one kind are one call of their own write
 * (appendEvents, enqueueJobs). Every notify in the transaction is the same (channel, payload), so
 * PostgreSQL delivers one, at commit.
 */
export async function runInTransaction(trx: Db, ops: readonly TxOp[]): Promise<TxResult[]> {
  const out: TxResult[] = [];
  for (let i = 0; i < ops.length; ) {
    let j = i + 1;
    while (j < ops.length && ops[j].kind === ops[i].kind) j++;
    const run = ops.slice(i, j);
    if (ops[i].kind === 'mercure') {
      const updates = run.map((op) => (op as { update: MercureUpdate }).update);
      for (const id of await appendUpdates(trx, updates)) out.push({ mercure: { id } });
    } else if (ops[i].kind === 'publish') {
      const events = run.map((op) => (op as { event: EventInput }).event);
      for (const r of await appendEvents(trx, events)) out.push({ publish: r });
    } else {
      const jobs = run.map((op) => (op as { job: JobInput }).job);
      for (const r of await enqueueJobs(trx, jobs)) out.push({ enqueue: r });
    }
    i = j;
  }
  return out;
}
