/**
 * Retention SQL: the feed's partitions, the trim mark and feed statistics. The janitor (janitor.ts)
 * drives these; `npm run maint` and /metrics read the statistics. Every function takes `(db | trx)`.
 *
 * The feed is range-partitioned by created_at (migrations/0001_baseline.ts). Partitions are named after their
 * UTC lower bound (`feed_p20260102_000000`); `feed_history` holds rows that predate partitioning and
 * `feed_default` catches rows no partition covers (only if the janitor fell behind).
 */
import { type Kysely, type RawBuilder, sql } from 'kysely';
import type { Database, Db } from '../db/database.ts';
import { lockSchemaChanges } from '../db/locks.ts';
import type { Cursor } from '../feed/cursor.ts';
import { readTrimMark } from '../feed/queries/trim-mark.ts';

/** Events a reader of the feed (a stream subscription) had not reached when retention dropped them. */
export interface Loss {
  /** The stream subscription's name. */
  subscription: string;
  events: number;
}

/**
 * Called inside the transaction that drops or deletes feed rows, before it does: `rows` is a subquery
 * of those rows (stream, type, txid, id), `where` names them (a partition). Returns who lost what.
 * The flows supply it (src/flows/losses.ts): retention itself knows no reader of the feed.
 */
export type DropHook = (trx: Db, rows: RawBuilder<unknown>, where: string) => Promise<Loss[]>;

export interface Partition {
  name: string;
  /** Bounds in epoch ms; null: MINVALUE (feed_history) or the default partition (both null). */
  from: number | null;
  to: number | null;
  isDefault: boolean;
  bytes: number;
  /** Planner estimate (pg_class.reltuples), -1 before the first ANALYZE. */
  rowsEstimate: number;
}

/** The UTC lower bound as a partition name: names sort by time. */
export function partitionName(from: Date): string {
  const iso = from.toISOString();
  return `feed_p${iso.slice(0, 10).replaceAll('-', '')}_${iso.slice(11, 19).replaceAll(':', '')}`;
}

/** The feed's partitions, oldest first (the default partition last). */
export async function listPartitions(db: Db): Promise<Partition[]> {
  const { rows } = await sql<{
    name: string;
    from_ms: number | null;
    to_ms: number | null;
    is_default: boolean;
    bytes: string;
    reltuples: number;
  }>`
    select c.relname as name,
           extract(epoch from (regexp_match(b.expr, 'FROM \\(''([^'']+)''\\)'))[1]::timestamptz)::float8 * 1000 as from_ms,
           extract(epoch from (regexp_match(b.expr, 'TO \\(''([^'']+)''\\)'))[1]::timestamptz)::float8 * 1000 as to_ms,
           b.expr = 'DEFAULT' as is_default,
           pg_total_relation_size(c.oid)::text as bytes,
           c.reltuples::float8 as reltuples
    from pg_inherits i
    join pg_class c on c.oid = i.inhrelid
    cross join lateral (select pg_get_expr(c.relpartbound, c.oid) as expr) b
    -- A partition dropped while this statement runs is still in its snapshot of the catalog, but
    -- pg_get_expr finds no relation by then and answers null: it is gone, not listed.
    where i.inhparent = 'commitfeed.feed'::regclass and b.expr is not null`.execute(db);
  return rows
    .map((r) => ({
      name: r.name,
      from: r.from_ms,
      to: r.to_ms,
      isDefault: r.is_default,
      bytes: Number(r.bytes),
      rowsEstimate: r.reltuples,
    }))
    .sort((a, b) =>
      a.isDefault !== b.isDefault ? (a.isDefault ? 1 : -1) : (a.to ?? Infinity) - (b.to ?? Infinity),
    );
}

/**
 * Creates the partition [from, to) without blocking inserts: CREATE TABLE … PARTITION OF would take
 * an ACCESS EXCLUSIVE lock on the feed; ATTACH PARTITION takes SHARE UPDATE EXCLUSIVE (inserts and
 * reads go on). The indexes are created by ATTACH, on an empty table. Returns false when the default
 * partition already holds rows in that range (ATTACH would fail): those stay in the default partition.
 * Like a drop, it first waits for a migration run to end (src/db/locks.ts), then at most
 * `lockTimeoutMs` for its table locks.
 */
export async function createPartition(db: Db, from: Date, to: Date, lockTimeoutMs: number): Promise<boolean> {
  const name = partitionName(from);
  const table = sql.id('commitfeed', name);
  return db.transaction().execute(async (trx) => {
    await lockSchemaChanges(trx);
    await sql`select set_config('lock_timeout', ${`${lockTimeoutMs}ms`}, true)`.execute(trx);
    const { rows } = await sql<{ taken: boolean }>`
      select exists (select 1 from commitfeed.feed_default
                     where created_at >= ${from.toISOString()}::timestamptz
                       and created_at < ${to.toISOString()}::timestamptz) as taken`.execute(trx);
    if (rows[0].taken) return false;
    await sql`create table ${table} (like commitfeed.feed including defaults including constraints)`.execute(
      trx,
    );
    await sql`
      alter table commitfeed.feed attach partition ${table}
      for values from (${sql.lit(from.toISOString())}) to (${sql.lit(to.toISOString())})`.execute(trx);
    return true;
  });
}

/**
 * Drops one partition and raises the trim mark to its highest cursor, in one transaction: a reader
 * either still sees the rows or sees the new mark, never neither. Dropping a partition takes an ACCESS
 * EXCLUSIVE lock on the feed for the few milliseconds of the drop; it is taken first (the order every
 * reader and writer uses: parent, then partitions) and waits at most `lockTimeoutMs` — publishes
 * queue behind it meanwhile, then proceed; on timeout nothing changes and the next run tries again.
 * Before it, the migrations lock (src/db/locks.ts): no partition is dropped while a migration runs.
 * Returns the partition's highest cursor (null when it was empty). `onDrop` (see DropHook) runs in the
 * same transaction before the drop; its losses are added to `lost`.
 */
export async function dropPartition(
  db: Db,
  part: Pick<Partition, 'name' | 'to'>,
  lockTimeoutMs: number,
  onDrop?: DropHook,
  lost: Loss[] = [],
): Promise<Cursor | null> {
  const table = sql.id('commitfeed', part.name);
  return db.transaction().execute(async (trx) => {
    await lockSchemaChanges(trx);
    await sql`select set_config('lock_timeout', ${`${lockTimeoutMs}ms`}, true)`.execute(trx);
    await sql`lock table commitfeed.feed in access exclusive mode`.execute(trx);
    // After the lock: every transaction that wrote to the partition has finished, and this statement's
    // snapshot sees all of them.
    const { rows } = await sql<{ txid: string; id: string }>`
      select p.txid::text as txid, p.id::text as id from ${table} p
      order by p.txid desc, p.id desc limit 1`.execute(trx);
    const top = rows[0] ? { txid: Number(rows[0].txid), id: Number(rows[0].id) } : null;
    await raiseTrimMark(trx, top, part.to === null ? null : new Date(part.to));
    // Readers that had not reached some of these rows: reported, never skipped in silence.
    if (top !== null && onDrop) {
      lost.push(...(await onDrop(trx, sql`select stream, type, txid, id from ${table}`, part.name)));
    }
    await sql`drop table ${table}`.execute(trx);
    return top;
  });
}

/**
 * Deletes rows older than `before` from the default partition (rows only land there when the janitor
 * fell behind, so this is a small, rare DELETE), raising the trim mark in the same transaction.
 * `onDrop`'s losses are added to `lost` (see dropPartition).
 */
export async function trimDefaultPartition(
  db: Db,
  before: Date,
  onDrop?: DropHook,
  lost: Loss[] = [],
): Promise<number> {
  return db.transaction().execute(async (trx) => {
    if (onDrop) {
      const rows = sql`select stream, type, txid, id from commitfeed.feed_default
                       where created_at < ${before.toISOString()}::timestamptz`;
      lost.push(...(await onDrop(trx, rows, 'feed_default')));
    }
    const { rows } = await sql<{ n: string; txid: string | null; id: string | null }>`
      with d as (
        delete from commitfeed.feed_default where created_at < ${before.toISOString()}::timestamptz
        returning txid, id
      ), top as (select d.txid, d.id from d order by d.txid desc, d.id desc limit 1)
      select (select count(*) from d)::text as n, (select top.txid::text from top) as txid,
             (select top.id::text from top) as id`.execute(trx);
    const r = rows[0];
    if (r.txid !== null) await raiseTrimMark(trx, { txid: Number(r.txid), id: Number(r.id) }, before);
    return Number(r.n);
  });
}

async function raiseTrimMark(trx: Db, top: Cursor | null, before: Date | null): Promise<void> {
  await sql`
    update commitfeed.trim_mark m
    set txid = case when ${top !== null} and (m.txid, m.id) < (${String(top?.txid ?? 0)}::xid8, ${top?.id ?? 0}::int8)
                    then ${String(top?.txid ?? 0)}::xid8 else m.txid end,
        id   = case when ${top !== null} and (m.txid, m.id) < (${String(top?.txid ?? 0)}::xid8, ${top?.id ?? 0}::int8)
                    then ${top?.id ?? 0}::int8 else m.id end,
        trimmed_at = clock_timestamp(),
        trimmed_before = greatest(m.trimmed_before, ${before?.toISOString() ?? null}::timestamptz)`.execute(
    trx,
  );
}

/** Deletes idempotency keys older than `before`, in batches (a key table only holds keyed events). */
export async function trimKeys(db: Db, before: Date, batch = 5000, maxBatches = 100): Promise<number> {
  let total = 0;
  for (let i = 0; i < maxBatches; i++) {
    const { numAffectedRows } = await sql`
      delete from commitfeed.feed_keys k
      where k.ctid = any (array(select c.ctid from commitfeed.feed_keys c
                                where c.created_at < ${before.toISOString()}::timestamptz limit ${batch}))`.execute(
      db,
    );
    const n = Number(numAffectedRows ?? 0);
    total += n;
    if (n < batch) break;
  }
  return total;
}

/**
 * ANALYZEs the commitfeed tables (feed partitions, feed_keys, jobs, trim_mark) whose rows changed a
 * lot since they were last analysed (and by at least `minRows`). Autovacuum normally does this; where
 * it is off, nothing else would, and the planner then picks whole-stream scans for catch-up reads
 * (measured: 9.4 s per 1,000-row page after a 1M-row load, 6.6 ms once analysed).
 * `rule` 'changed' (a maintenance run): by more than 10%. 'doubled' (the janitor's frequent check):
 * by at least as many rows as the table held at its last analyze, so a fresh, fast-growing partition
 * gets statistics at about 1,000, 2,000, 4,000... rows rather than up to a JANITOR_INTERVAL late,
 * for about log2(rows) analyses in all.
 * Returns the tables analysed. Takes no transaction: a table dropped meanwhile is skipped by its error.
 */
export async function analyzeChanged(
  db: Kysely<Database>,
  minRows = 1000,
  rule: 'changed' | 'doubled' = 'changed',
): Promise<string[]> {
  const { rows } = await sql<{ name: string }>`
    select format('%I.%I', schemaname, relname) as name
    from pg_stat_user_tables
    where schemaname = 'commitfeed'
      and n_mod_since_analyze >= greatest(${minRows}::int8, ${
        rule === 'changed' ? sql`n_live_tup / 10` : sql`n_live_tup - n_mod_since_analyze`
      })
    order by relname`.execute(db);
  const analyzed: string[] = [];
  for (const r of rows) {
    try {
      await sql`analyze ${sql.raw(r.name)}`.execute(db);
      analyzed.push(r.name);
    } catch (err) {
      // Dropped since it was listed (a janitor's partition drop, maybe another instance's): skipped,
      // and the tables after it are still analysed.
      if ((err as { code?: string }).code !== '42P01') throw err;
    }
  }
  return analyzed;
}

export interface FeedStats {
  partitions: Partition[];
  /** Bytes on disk of every partition, indexes included. */
  bytes: number;
  /** Planner estimate of the feed's rows. */
  rowsEstimate: number;
  /** created_at of the oldest retained event in feed order (null: the feed is empty). */
  oldestEventAt: Date | null;
  trimMark: string;
  trimmedAt: Date | null;
  keys: number;
  lastRun: { startedAt: Date; durationMs: number; instance: string | null; error: string | null } | null;
}

/** Feed statistics for operators and /metrics: a handful of catalog reads and one index probe. */
export async function feedStats(db: Db): Promise<FeedStats> {
  const partitions = await listPartitions(db);
  const { rows } = await sql<{
    oldest: Date | null;
    keys: number;
    started_at: Date | null;
    duration_ms: number | null;
    instance: string | null;
    error: string | null;
  }>`
    select (select f.created_at from commitfeed.feed f order by f.txid, f.id limit 1) as oldest,
           (select c.reltuples::float8 from pg_class c where c.oid = 'commitfeed.feed_keys'::regclass) as keys,
           r.started_at, r.duration_ms, r.instance, r.error
    from (select 1) one left join commitfeed.janitor_runs r on true`.execute(db);
  const r = rows[0];
  const { mark, trimmedAt } = await readTrimMark(db);
  return {
    partitions,
    bytes: partitions.reduce((n, p) => n + p.bytes, 0),
    rowsEstimate: partitions.reduce((n, p) => n + Math.max(0, p.rowsEstimate), 0),
    oldestEventAt: r.oldest,
    trimMark: `${mark.txid}-${mark.id}`,
    trimmedAt,
    keys: Math.max(0, r.keys),
    lastRun: r.started_at
      ? { startedAt: r.started_at, durationMs: r.duration_ms ?? 0, instance: r.instance, error: r.error }
      : null,
  };
}
