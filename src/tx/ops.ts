/**
 * The operations of `POST /v1/tx`: each op is checked with the same validation as its own endpoint
 * (src/feed/validate.ts), with errors naming the op (`ops[3].publish.stream: ...`), before anything
 * is written; then all ops run in one transaction.
 */
import type { Kysely } from 'kysely';
import type { Database, Db } from '../db/database.ts';
import { ApiError } from '../errors.ts';
import type { Feed } from '../feed/feed.ts';
import { type AppendResult, type EventInput, appendEvents } from '../feed/queries.ts';
import { type EventBody, assertName, toEventInput } from '../feed/validate.ts';

export const MAX_OPS = 1000;
export const OP_KINDS = ['publish'] as const;

export type TxOp = { kind: 'publish'; event: EventInput };
export type TxResult = { publish: AppendResult };

const PUBLISH_FIELDS = new Set(['stream', 'data', 'type', 'key']);

const isObject = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === 'object' && !Array.isArray(v);

/** Checks every op (throws a 400 naming the first bad one); nothing is written before this passes. */
export function parseOps(ops: readonly unknown[], maxEventBytes: number): TxOp[] {
  return ops.map((op, i) => parseOp(op, `ops[${i}]`, maxEventBytes));
}

function parseOp(op: unknown, where: string, maxEventBytes: number): TxOp {
  const kinds = isObject(op) ? Object.keys(op) : [];
  if (!isObject(op) || kinds.length !== 1 || !(OP_KINDS as readonly string[]).includes(kinds[0])) {
    throw new ApiError(
      400,
      'invalid_request',
      `${where} must be an object with exactly one of ${OP_KINDS.map((k) => `"${k}"`).join(', ')}` +
        (kinds.length > 0 ? ` (got ${kinds.map((k) => JSON.stringify(k)).join(', ')})` : ''),
    );
  }
  return { kind: 'publish', event: parsePublish(op.publish, `${where}.publish`, maxEventBytes) };
}

function parsePublish(body: unknown, where: string, maxEventBytes: number): EventInput {
  if (!isObject(body)) {
    throw new ApiError(400, 'invalid_request', `${where} must be an object with "stream" and "data"`);
  }
  for (const k of Object.keys(body)) {
    if (!PUBLISH_FIELDS.has(k)) {
      throw new ApiError(400, 'invalid_request', `${where} must NOT have additional property '${k}'`);
    }
  }
  const { stream, ...event } = body;
  try {
    assertName(stream);
  } catch (err) {
    if (err instanceof ApiError)
      throw new ApiError(err.statusCode, err.code, `${where}.stream: ${err.message}`);
    throw err;
  }
  return toEventInput(stream, event as unknown as EventBody, maxEventBytes, where);
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
  // Our own commit: read now rather than wait for the NOTIFY to come back.
  deps.feed.tailer.wake();
  return results;
}

/** Runs ops in `trx`, in order; consecutive ops of one kind go out as one statement. */
export async function runInTransaction(trx: Db, ops: readonly TxOp[]): Promise<TxResult[]> {
  const out: TxResult[] = [];
  for (let i = 0; i < ops.length; ) {
    let j = i + 1;
    while (j < ops.length && ops[j].kind === ops[i].kind) j++;
    const run = ops.slice(i, j);
    const results = await appendEvents(
      trx,
      run.map((op) => op.event),
    );
    for (const r of results) out.push({ publish: r });
    i = j;
  }
  return out;
}
