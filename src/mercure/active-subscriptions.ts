/**
 * Active subscriptions (draft-08 §Active Subscriptions, optional; on with MERCURE_SUBSCRIPTIONS):
 * every matcher of every hub connection (subscriber) is a Mercure subscription; its start and its end
 * are published as private updates of SSE type `mercure` on
 * `<hub path>/subscriptions/{match_type}/{match}/{subscriber}` (RFC 6570 simple expansion: each value
 * percent-encoded once, `!'()*` included), and the Mercure subscriptions API
 * (active-subscription-routes.ts) lists the open ones.
 *
 * With MERCURE_PROTOCOL_COMPATIBILITY=8, a subscription made with `topic=` has the 0.x shape instead
 * (legacy-subscriptions.ts): its own topic, a JSON-LD document and no SSE event type.
 *
 * Each Mercure subscription's row is written in the same transaction as its event (through the hub's
 * own commitfeed.mercure_append, `internal`), so the API and the events never disagree, on any replica.
 *
 * Lifecycle: one per process. start() registers the instance with a lease, renewed every third of
 * MERCURE_INSTANCE_LEASE; each renewal also sweeps instances whose lease ran out (they died without
 * closing their connections): their rows are deleted and `active: false` published for them, in one
 * transaction, by whichever survivor gets there first (row locks make it exactly once). If this
 * instance was swept while alive (a database outage longer than the lease), the next renewal
 * registers its open Mercure subscriptions again, with `active: true`. A database failure in opened()
 * or closed() is logged and the connection goes on (its Mercure subscriptions are then not listed, or
 * are ended by the sweep). stop() ends this instance's Mercure subscriptions and drops its lease.
 */
import { randomUUID } from 'node:crypto';
import { CompiledQuery } from 'kysely';
import type { FastifyBaseLogger } from 'fastify';
import { type Db, inTransaction } from '../db/database.ts';
import type { MercureAuthorizer } from './authorize.ts';
import type { MercureGrants } from './grants.ts';
import { type LegacySubscriptionDoc, isLegacyDoc, legacyDoc } from './legacy-subscriptions.ts';
import type { TopicSelector } from './match.ts';
import { type MercureUpdate, appendUpdates } from './publish.ts';

/** A subscriber (one hub connection), as the subscribe route reports it. */
export interface MercureSubscriber {
  /** Its subscriber id: hub-assigned, unique per connection (a random `urn:uuid:`); never taken from
   * the client. */
  subscriber: string;
  selectors: TopicSelector[];
  grants: MercureGrants | null;
}

/** A Mercure subscription's document, in its events and in the API. */
export interface MercureSubscriptionDoc {
  id: string;
  type: 'subscription';
  match_type: string;
  match: string;
  subscriber: string;
  active: boolean;
  payload?: unknown;
}

/** Either shape: 1.0, or 0.x for a `topic=` subscription (whose stored match_type is `topic`). */
export type SubscriptionDoc = MercureSubscriptionDoc | LegacySubscriptionDoc;

/** The matcher a document describes, as its row stores it. */
const matcherOf = (d: SubscriptionDoc): [string, string] =>
  isLegacyDoc(d) ? ['topic', d.topic] : [d.match_type, d.match];

/** RFC 6570 simple string expansion of one value: everything but unreserved characters encoded. */
export function expandVar(value: string): string {
  return encodeURIComponent(value).replace(
    /[!'()*]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  );
}

/** A Mercure subscription's topic (and id): hub path + /subscriptions/{match_type}/{match}/{subscriber}. */
export function mercureSubscriptionTopic(
  hubPath: string,
  matchType: string,
  match: string,
  subscriber: string,
): string {
  return `${hubPath}/subscriptions/${expandVar(matchType)}/${expandVar(match)}/${expandVar(subscriber)}`;
}

/** A new subscriber id: random, so it discloses nothing about the token (draft §Subscriber Identifier). */
export const newSubscriberId = (): string => `urn:uuid:${randomUUID()}`;

const asEvent = (doc: SubscriptionDoc): MercureUpdate => ({
  topics: [doc.id],
  data: JSON.stringify(doc),
  private: true,
  id: null,
  type: isLegacyDoc(doc) ? null : 'mercure',
  retry: null,
});

const INSERT_SQL = `
  insert into commitfeed.mercure_subscriptions (topic, subscriber, match_type, match, doc, instance)
  select * from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::uuid[])
  on conflict (topic) do nothing
  returning doc`;
const END_BY_SUBSCRIBER_SQL = `
  delete from commitfeed.mercure_subscriptions where subscriber = $1
  returning doc || '{"active": false}'::jsonb as doc`;
const END_BY_INSTANCE_SQL = `
  delete from commitfeed.mercure_subscriptions where instance = any($1::uuid[])
  returning doc || '{"active": false}'::jsonb as doc`;
const BEAT_SQL = 'update commitfeed.mercure_instances set seen = now() where instance = $1';
const REGISTER_SQL = `
  insert into commitfeed.mercure_instances (instance) values ($1)
  on conflict (instance) do update set seen = now()`;
const DEAD_SQL = `
  delete from commitfeed.mercure_instances
  where instance in (select instance from commitfeed.mercure_instances
                     where seen < now() - $1::int * interval '1 millisecond' and instance <> $2
                     for update skip locked)
  returning instance`;
const DROP_SELF_SQL = 'delete from commitfeed.mercure_instances where instance = $1';
const LIST_SQL = `
  select doc from commitfeed.mercure_subscriptions
  where ($1::text is null or match_type = $1) and ($2::text is null or match = $2)
    and ($3::text is null or subscriber = $3) and ($5::boolean is null or (match_type = 'topic') = $5)
  order by since, topic
  limit $4`;

export class ActiveSubscriptions {
  /** This process's lease. */
  readonly instance = randomUUID();
  private readonly live = new Map<string, MercureSubscriber>();
  /** Per subscriber, the pending opened(): closed() waits for it, so `false` never precedes `true`. */
  private readonly pending = new Map<string, Promise<void>>();
  private timer: NodeJS.Timeout | undefined;
  private beating: Promise<void> | undefined;

  constructor(
    private readonly db: Db,
    private readonly authorizer: MercureAuthorizer,
    private readonly hubPath: string,
    private readonly leaseMs: number,
    private readonly log: FastifyBaseLogger,
  ) {}

  async start(): Promise<void> {
    await this.db.executeQuery(CompiledQuery.raw(REGISTER_SQL, [this.instance]));
    this.timer = setInterval(() => void this.beat(), Math.max(10, Math.floor(this.leaseMs / 3)));
    this.timer.unref();
  }

  /** The documents of a subscriber's Mercure subscriptions (one per distinct matcher). */
  docs(conn: MercureSubscriber, active: boolean): SubscriptionDoc[] {
    const seen = new Set<string>();
    const out: SubscriptionDoc[] = [];
    for (const s of conn.selectors) {
      const payload = this.authorizer.payloadFor(conn.grants, s.match);
      if (s.matchType === 'topic') {
        out.push(legacyDoc(this.hubPath, s.match, conn.subscriber, active, payload));
        continue; // `topic=` values are distinct already (subscribe.ts), and their ids are their own
      }
      const id = mercureSubscriptionTopic(this.hubPath, s.matchType, s.match, conn.subscriber);
      if (seen.has(id)) continue;
      seen.add(id);
      out.push({
        id,
        type: 'subscription',
        match_type: s.matchType,
        match: s.match,
        subscriber: conn.subscriber,
        active,
        ...(payload === undefined ? {} : { payload }),
      });
    }
    return out;
  }

  /** A subscriber connected: its Mercure subscriptions are recorded and announced (`active: true`). */
  opened(conn: MercureSubscriber): Promise<void> {
    this.live.set(conn.subscriber, conn);
    const p = this.record(conn).catch((err) => {
      this.log.warn({ err, subscriber: conn.subscriber }, 'Mercure: could not record a subscription');
    });
    this.pending.set(conn.subscriber, p);
    return p;
  }

  /** A subscriber left: its Mercure subscriptions are removed and announced (`active: false`). */
  async closed(conn: MercureSubscriber): Promise<void> {
    this.live.delete(conn.subscriber);
    await this.pending.get(conn.subscriber);
    this.pending.delete(conn.subscriber);
    try {
      await this.end(END_BY_SUBSCRIBER_SQL, [conn.subscriber]);
    } catch (err) {
      // The row stays until this instance stops or is swept; the event comes then.
      this.log.warn({ err, subscriber: conn.subscriber }, 'Mercure: could not end a subscription');
    }
  }

  /** Ends this instance's Mercure subscriptions and drops its lease (at shutdown, once the streams ended). */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.beating;
    await Promise.allSettled(this.pending.values());
    await inTransaction(this.db, async (trx) => {
      await this.end(END_BY_INSTANCE_SQL, [[this.instance]], trx);
      await trx.executeQuery(CompiledQuery.raw(DROP_SELF_SQL, [this.instance]));
    });
  }

  /**
   * Mercure subscription documents, optionally of one matcher or one subscriber, and only the 0.x
   * ones (`legacy: true`) or only the 1.0 ones (`false`); at most `limit`.
   */
  async list(
    filter: { matchType?: string; match?: string; subscriber?: string; legacy?: boolean },
    limit: number,
  ): Promise<SubscriptionDoc[]> {
    const { rows } = await this.db.executeQuery<{ doc: SubscriptionDoc }>(
      CompiledQuery.raw(LIST_SQL, [
        filter.matchType ?? null,
        filter.match ?? null,
        filter.subscriber ?? null,
        limit,
        filter.legacy ?? null,
      ]),
    );
    return rows.map((r) => r.doc);
  }

  /** Renews the lease (re-registering if this instance was swept), then ends dead instances' rows.
   * One renewal at a time: a call during one waits for it. */
  beat(): Promise<void> {
    this.beating ??= this.renew().finally(() => {
      this.beating = undefined;
    });
    return this.beating;
  }

  private async renew(): Promise<void> {
    try {
      const r = await this.db.executeQuery(CompiledQuery.raw(BEAT_SQL, [this.instance]));
      if (Number(r.numAffectedRows ?? 0) === 0) {
        this.log.warn('Mercure: this instance was taken for dead; announcing its subscriptions again');
        await this.db.executeQuery(CompiledQuery.raw(REGISTER_SQL, [this.instance]));
        for (const conn of this.live.values()) await this.record(conn);
      }
      await this.sweep();
    } catch (err) {
      this.log.warn({ err }, 'Mercure: subscription lease renewal failed (retried)');
    }
  }

  /** Ends the Mercure subscriptions of instances whose lease ran out; returns how many were ended. */
  async sweep(): Promise<number> {
    return inTransaction(this.db, async (trx) => {
      const { rows } = await trx.executeQuery<{ instance: string }>(
        CompiledQuery.raw(DEAD_SQL, [this.leaseMs, this.instance]),
      );
      if (rows.length === 0) return 0;
      const n = await this.end(END_BY_INSTANCE_SQL, [rows.map((r) => r.instance)], trx);
      this.log.info(
        { instances: rows.map((r) => r.instance), subscriptions: n },
        'Mercure: ended the subscriptions of stopped instances',
      );
      return n;
    });
  }

  private async record(conn: MercureSubscriber): Promise<void> {
    const docs = this.docs(conn, true);
    if (docs.length === 0) return;
    await inTransaction(this.db, async (trx) => {
      const { rows } = await trx.executeQuery<{ doc: SubscriptionDoc }>(
        CompiledQuery.raw(INSERT_SQL, [
          docs.map((d) => d.id),
          docs.map((d) => d.subscriber),
          docs.map((d) => matcherOf(d)[0]),
          docs.map((d) => matcherOf(d)[1]),
          docs.map((d) => JSON.stringify(d)),
          docs.map(() => this.instance),
        ]),
      );
      // Only the rows this call added are announced (a re-registration skips the ones still there).
      if (rows.length > 0)
        await appendUpdates(
          trx,
          rows.map((r) => asEvent(r.doc)),
          true,
        );
    });
  }

  /** Deletes rows and publishes `active: false` for each, in one transaction. */
  private async end(query: string, params: unknown[], db: Db = this.db): Promise<number> {
    return inTransaction(db, async (trx) => {
      const { rows } = await trx.executeQuery<{ doc: SubscriptionDoc }>(CompiledQuery.raw(query, params));
      if (rows.length > 0)
        await appendUpdates(
          trx,
          rows.map((r) => asEvent(r.doc)),
          true,
        );
      return rows.length;
    });
  }
}
