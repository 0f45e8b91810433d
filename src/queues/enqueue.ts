/**
 * Enqueue: job rows plus one wake-up row per queue, in the caller's transaction (or a new one).
 *
 * States: 'ready' (claimable from run_at: a future run_at is a delayed job), 'leased' (held until
 * lease_expires_at, then claimable again), 'dead' (out of attempts). An ack deletes the row and counts
 * it in commitfeed.queues.completed, so the claim query never wades through history.
 */
import { sql } from 'kysely';
import { type Db, inTransaction } from '../db/database.ts';
import { appendEvents } from '../feed/queries.ts';
import { wakeEvent } from './wake-stream.ts';

const keyOf = (queue: string, key: string) => `${queue}\u0000${key}`;

/** One job to enqueue, already validated (see validate.ts). */
export interface JobInput {
  queue: string;
  /** JSON text, stored and served back byte for byte. */
  payload: string;
  priority: number;
  /** Seconds from now; ignored when runAt is set. */
  delay: number;
  /** ISO timestamp, or null. */
  runAt: string | null;
  key: string | null;
  maxAttempts: number;
  /** Normalised backoff as JSON text: {"type","delay","max","jitter"}. */
  backoff: string;
}

export interface EnqueueResult {
  id: string;
  queue: string;
  /** True when `key` matched a job of the queue not yet completed: nothing was enqueued. */
  duplicate: boolean;
}

/**
 * Enqueues jobs and appends one wake-up row per queue to the feed (stream `queue/<name>`, type
 * `enqueued`, data `{"jobs":<n>}`) with appendEvents, whose pg_notify is delivered at commit: waiting
 * claimers wake exactly when the jobs become visible, and never for a rolled-back enqueue. The row is
 * a bare wake marker (claimers read the jobs table, not the feed), so it stays small whatever the
 * payloads. Jobs whose `key` matches a job of their queue not yet completed are not enqueued: their
 * result carries the existing id and `duplicate: true`.
 *
 * @example
 *   await db.transaction().execute(async (trx) => {
 *     await trx.insertInto('orders').values(order).execute();
 *     await enqueueJobs(trx, [{ queue: 'emails', payload: JSON.stringify({ to }), priority: 0, delay: 0,
 *       runAt: null, key: null, maxAttempts: 5, backoff: DEFAULT_BACKOFF }]);
 *   });
 */
export function enqueueJobs(db: Db, jobs: readonly JobInput[]): Promise<EnqueueResult[]> {
  return inTransaction(db, async (trx) => {
    // A key repeated within the call is enqueued once; later copies report the first.
    const firstOfKey = new Map<string, number>();
    const unique: JobInput[] = [];
    const slot: number[] = [];
    for (const j of jobs) {
      if (j.key !== null) {
        const k = keyOf(j.queue, j.key);
        const seen = firstOfKey.get(k);
        if (seen !== undefined) {
          slot.push(seen);
          continue;
        }
        firstOfKey.set(k, unique.length);
      }
      slot.push(unique.length);
      unique.push(j);
    }
    const results: (EnqueueResult | undefined)[] = new Array(unique.length);
    const inserted = new Map<string, number>();
    // A duplicate's original may be acked (deleted) between our conflict and our look-up: then the
    // key is free again and the next round inserts it.
    let todo = unique.map((_, i) => i);
    for (let round = 0; todo.length > 0; round++) {
      if (round === 5) throw new Error('enqueue: key dedup did not settle after 5 rounds');
      const batch = todo.map((i) => unique[i]);
      const { rows } = await sql<{ id: string; queue: string; key: string | null }>`
        with q as (
          insert into commitfeed.queues (name) select distinct unnest(${[...new Set(batch.map((j) => j.queue))]}::text[])
          on conflict do nothing
        ), ins as (
          insert into commitfeed.jobs (queue, payload, priority, run_at, key, max_attempts, backoff)
          select t.queue, t.payload, t.priority,
                 coalesce(t.run_at, clock_timestamp() + make_interval(secs => t.delay)),
                 t.key, t.max_attempts, t.backoff
          from unnest(${batch.map((j) => j.queue)}::text[], ${batch.map((j) => j.payload)}::json[],
                      ${batch.map((j) => j.priority)}::int4[], ${batch.map((j) => j.delay)}::float8[],
                      ${batch.map((j) => j.runAt)}::timestamptz[], ${batch.map((j) => j.key)}::text[],
                      ${batch.map((j) => j.maxAttempts)}::int4[], ${batch.map((j) => j.backoff)}::jsonb[])
            as t(queue, payload, priority, delay, run_at, key, max_attempts, backoff)
          on conflict (queue, key) where key is not null do nothing
          returning id, queue, key
        )
        select id::text as id, queue, key from ins`.execute(trx);
      // RETURNING yields rows in insertion order; rows skipped by ON CONFLICT are absent, so keyed rows
      // are matched by (queue, key) and unkeyed ones by position among the unkeyed.
      const byKey = new Map<string, EnqueueResult>();
      let r = 0;
      for (const row of rows) {
        const res: EnqueueResult = { id: row.id, queue: row.queue, duplicate: false };
        inserted.set(row.queue, (inserted.get(row.queue) ?? 0) + 1);
        if (row.key !== null) byKey.set(keyOf(row.queue, row.key), res);
        else {
          while (batch[r].key !== null) r++;
          results[todo[r++]] = res;
        }
      }
      const missing: number[] = [];
      for (const i of todo) {
        const j = unique[i];
        if (j.key === null) continue;
        const found = byKey.get(keyOf(j.queue, j.key));
        if (found) results[i] = found;
        else missing.push(i);
      }
      if (missing.length === 0) break;
      const existing = await findByKeys(
        trx,
        missing.map((i) => unique[i]),
      );
      todo = [];
      for (const i of missing) {
        const j = unique[i];
        const id = existing.get(keyOf(j.queue, j.key!));
        if (id) results[i] = { id, queue: j.queue, duplicate: true };
        else todo.push(i);
      }
    }
    if (inserted.size > 0) {
      await appendEvents(
        trx,
        [...inserted].map(([queue, n]) => wakeEvent(queue, 'enqueued', `{"jobs":${n}}`)),
      );
    }
    const seenSlot = new Set<number>();
    return slot.map((s) => {
      const res = results[s]!;
      if (seenSlot.has(s)) return { ...res, duplicate: true };
      seenSlot.add(s);
      return res;
    });
  });
}

async function findByKeys(db: Db, jobs: JobInput[]): Promise<Map<string, string>> {
  const { rows } = await sql<{ queue: string; key: string; id: string }>`
    select j.queue, j.key, j.id::text as id
    from commitfeed.jobs j
    join unnest(${jobs.map((x) => x.queue)}::text[], ${jobs.map((x) => x.key)}::text[]) as k(queue, key)
      on j.queue = k.queue and j.key = k.key`.execute(db);
  return new Map(rows.map((r) => [keyOf(r.queue, r.key), r.id]));
}
