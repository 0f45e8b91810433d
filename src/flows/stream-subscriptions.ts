/**
 * Stream subscriptions' SQL: create, list, pause/resume, delete, and one follow step. A stream subscription
 * is a durable cursor over the feed that turns every event of a stream (optionally of one type) into
 * one job of a queue; the follower (follower.ts) drives follow steps, the routes the rest. Every
 * function takes `(db | trx, ...)`.
 */
import { sql } from 'kysely';
import type { Db } from '../db/database.ts';
import { type Cursor, START } from '../feed/cursor.ts';
import { ApiError } from '../errors.ts';
import { globRegExp } from '../streams/glob.ts';

/**
 * The regular expression (JavaScript's and PostgreSQL's alike) of names and globs: a stream matches
 * when it matches one. Internal streams (a '/' in their names) never match.
 */
export function streamsPattern(streams: readonly string[]): string {
  return streams.map((g) => `(${globRegExp(g).source})`).join('|');
}

/** What a stream subscription is made with and shows in its status. */
interface StreamSubscriptionDefinition {
  name: string;
  stream: string;
  /** Only events of this type; null: every event of the stream. */
  type: string | null;
  queue: string;
  priority: number;
  maxAttempts: number;
}

export interface StreamSubscriptionInput extends StreamSubscriptionDefinition {
  /** Normalised backoff, JSON text (see toJobInput). */
  backoff: string;
  /**
   * Several streams instead of `stream`: names and globs (src/streams/glob.ts). The follow step then
   * pages through the whole feed and keeps the events of matching streams.
   */
  streams?: readonly string[];
  /** Only events of one of these types (besides `type`). */
  types?: readonly string[];
  /** Every job in this ordered group: handed out one at a time, in feed order. */
  group?: string;
  /** Where the cursor starts: a cursor, the feed's start, or `latest` (the current horizon). */
  from: Cursor | 'earliest' | 'latest';
}

export interface StreamSubscriptionStatus extends StreamSubscriptionDefinition {
  /** Names and globs of a stream subscription over several streams (null: `stream` alone). */
  streams: string[] | null;
  types: string[] | null;
  paused: boolean;
  /** The last event turned into a job (or passed over by the type filter). */
  cursor: string;
  jobs: number;
  followedAt: string | null;
  /** Events retention dropped before they became jobs (never silently: see the janitor). */
  lostEvents: number;
  lastLoss: { at: string; events: number; partition: string } | null;
  createdAt: string;
}

interface Row {
  name: string;
  stream: string;
  streams: string[] | null;
  types: string[] | null;
  type: string | null;
  queue: string;
  priority: number;
  max_attempts: number;
  paused: boolean;
  cursor: string;
  jobs: string;
  followed_at: Date | null;
  lost_events: string;
  last_loss: { at: string; events: number; partition: string } | null;
  created_at: Date;
}

const COLUMNS = sql`name, stream, streams, types, type, queue, priority, max_attempts, paused,
  cursor_txid::text || '-' || cursor_id::text as cursor, jobs::text as jobs, followed_at,
  lost_events::text as lost_events, last_loss, created_at`;

function toStatus(r: Row): StreamSubscriptionStatus {
  return {
    name: r.name,
    stream: r.stream,
    streams: r.streams,
    types: r.types,
    type: r.type,
    queue: r.queue,
    priority: r.priority,
    maxAttempts: r.max_attempts,
    paused: r.paused,
    cursor: r.cursor,
    jobs: Number(r.jobs),
    followedAt: r.followed_at?.toISOString() ?? null,
    lostEvents: Number(r.lost_events),
    lastLoss: r.last_loss,
    createdAt: r.created_at.toISOString(),
  };
}

/**
 * Creates a stream subscription (409 `subscription_exists` when the name is taken). `latest` starts at the
 * horizon: every event committed from now on becomes a job (so may a few that committed just before,
 * behind a transaction still open), none is missed.
 *
 * @example
 *   await createStreamSubscription(db, { name: 'order-emails', stream: 'orders', type: 'created',
 *     queue: 'emails', priority: 0, maxAttempts: 5, backoff: '{...}', from: 'latest' });
 */
export async function createStreamSubscription(
  db: Db,
  s: StreamSubscriptionInput,
): Promise<StreamSubscriptionStatus> {
  const from = s.from === 'earliest' ? START : s.from === 'latest' ? null : s.from;
  const streams = s.streams ? [...s.streams] : null;
  const pattern = streams ? streamsPattern(streams) : null;
  const types = s.types ? [...s.types] : null;
  const { rows } = await sql<Row>`
    insert into commitfeed.subscriptions (name, match, stream, streams, pattern, type, types, group_key,
                                          queue, priority, max_attempts, backoff, cursor_txid, cursor_id)
    select ${s.name}, ${pattern === null ? 'stream' : 'pattern'}, ${s.stream}, ${streams}::text[], ${pattern},
           ${s.type}, ${types}::text[], ${s.group ?? null}, ${s.queue}, ${s.priority}, ${s.maxAttempts},
           ${s.backoff}::jsonb,
           coalesce(${from === null ? null : String(from.txid)}::xid8, pg_snapshot_xmin(pg_current_snapshot())),
           coalesce(${from === null ? null : from.id}::int8, 0)
    on conflict (name) do nothing
    returning ${COLUMNS}`.execute(db);
  if (rows.length === 0) {
    throw new ApiError(
      409,
      'subscription_exists',
      `a subscription named ${s.name} exists; delete it first, or choose another name`,
    );
  }
  return toStatus(rows[0]);
}

/** One stream subscription, every one (`name` null), or only those not paused. */
export async function listStreamSubscriptions(
  db: Db,
  name: string | null,
  activeOnly = false,
): Promise<StreamSubscriptionStatus[]> {
  const { rows } = await sql<Row>`
    select ${COLUMNS} from commitfeed.subscriptions
    where (${name}::text is null or name = ${name}) and (not ${activeOnly} or not paused)
    order by name`.execute(db);
  return rows.map(toStatus);
}

/** Sets the paused flag; null when there is no such stream subscription. */
export async function setStreamSubscriptionPaused(
  db: Db,
  name: string,
  paused: boolean,
): Promise<StreamSubscriptionStatus | null> {
  const { rows } = await sql<Row>`
    update commitfeed.subscriptions set paused = ${paused} where name = ${name}
    returning ${COLUMNS}`.execute(db);
  return rows[0] ? toStatus(rows[0]) : null;
}

/** Deletes a stream subscription (its jobs stay in their queue); false when there was none. */
export async function deleteStreamSubscription(db: Db, name: string): Promise<boolean> {
  const { numAffectedRows } = await sql`delete from commitfeed.subscriptions where name = ${name}`.execute(
    db,
  );
  return Number(numAffectedRows ?? 0) > 0;
}

/**
 * One follow step (commitfeed.follow_subscription): up to `page` events after the cursor become jobs
 * and the cursor moves past them, in one transaction. `null` when the stream subscription is paused, gone,
 * or being followed by another replica right now.
 */
export async function followStep(
  db: Db,
  name: string,
  page: number,
): Promise<{ jobs: number; read: number } | null> {
  const { rows } = await sql<{ jobs: number; read: number }>`
    select jobs, read from commitfeed.follow_subscription(${name}, ${page})`.execute(db);
  return rows[0] ?? null;
}

/**
 * Moves a stream subscription's cursor (a replay: the events after `to` become jobs again, at the
 * follower's next step); false when there is no such stream subscription. Waits for a follow step in
 * progress (the row lock), so the step's own cursor update cannot overwrite this one.
 */
export async function moveStreamSubscriptionCursor(db: Db, name: string, to: Cursor): Promise<boolean> {
  const { numAffectedRows } = await sql`
    update commitfeed.subscriptions set cursor_txid = ${String(to.txid)}::xid8, cursor_id = ${to.id}::int8
    where name = ${name}`.execute(db);
  return Number(numAffectedRows ?? 0) > 0;
}
