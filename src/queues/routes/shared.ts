/** What the queue route groups share: their dependencies, the job id check and failure replies. */
import type { Kysely } from 'kysely';
import type { Config } from '../../config/config.ts';
import type { Database } from '../../db/database.ts';
import { ApiError } from '../../errors.ts';
import type { Feed } from '../../feed/feed.ts';
import type { Queues } from '../queues.ts';
import { JOB_ID_PATTERN } from '../schemas.ts';
import type { LeaseRef, SettleResult } from '../settle.ts';

/** `queues` for the operations that change the service's state, `db` for the plain statements. */
export interface QueueRouteDeps {
  db: Kysely<Database>;
  feed: Feed;
  queues: Queues;
  config: Config;
}

export type QueueReq = { Params: { queue: string } };
export type JobReq<B = unknown> = { Params: { queue: string; id: string }; Body: B };

export const QUEUE_TAGS = ['queues'];

const JOB_ID_RE = new RegExp(JOB_ID_PATTERN);

/** The job a path names, with the lease presented; a malformed id is a 400 invalid_id. */
export function jobRef(params: { queue: string; id: string }, lease: string): LeaseRef {
  if (!JOB_ID_RE.test(params.id)) {
    throw new ApiError(
      400,
      'invalid_id',
      `job id must be a decimal number (got ${JSON.stringify(params.id.slice(0, 40))})`,
    );
  }
  return { queue: params.queue, id: params.id, lease };
}

/** An operation's success, or its refusal thrown as the ApiError it describes. */
export function check<T extends SettleResult | { ok: boolean }>(res: T): Extract<T, { ok: true }> {
  if (!res.ok) {
    const f = res as Extract<SettleResult, { ok: false }>;
    throw new ApiError(f.status, f.code, f.message);
  }
  return res as Extract<T, { ok: true }>;
}

export const iso = (ms: number) => new Date(ms).toISOString();
