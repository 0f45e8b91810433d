/**
 * The webhooks service: endpoints and the delivery workers of this process. An endpoint owns a
 * stream subscription (`webhook:<name>`, over its streams and types: every matching committed event
 * becomes one job, exactly once, whatever crashes) feeding its own queue (`webhook:<name>`, paused
 * while the endpoint is disabled); the workers (worker.ts) claim from those queues, so every replica
 * may deliver and a crashed one's deliveries are retried when their leases run out. An ordered
 * endpoint's jobs are one ordered group (one in flight across replicas); a concurrent endpoint's
 * concurrency is each worker's own limit on deliveries in flight. The queue gets no concurrency
 * limit: a limited queue's claims take a lock and its acks write a wake-up row, which cost a
 * delivery more than the limit is worth here.
 *
 * Lifecycle: created by the server after the follower; `start()` (with WEBHOOKS on) begins a refresh
 * loop that keeps one worker per enabled endpoint (every POLL_INTERVAL, and at once after a change
 * made here); `stop()` ends the loop and the workers (deliveries in flight finish) and writes the
 * delivery log's last attempts. Failure: a failed refresh is logged and retried with backoff; the
 * workers it already runs keep going.
 */
import type { Kysely } from 'kysely';
import { Batcher } from '../commit/batcher.ts';
import type { Config } from '../config/config.ts';
import { type Database, type Db, inTransaction } from '../db/database.ts';
import { ApiError } from '../errors.ts';
import type { Cursor } from '../feed/cursor.ts';
import type { Follower } from '../flows/follower.ts';
import { Loop } from '../flows/loop.ts';
import { createStreamSubscription, deleteStreamSubscription } from '../flows/stream-subscriptions.ts';
import { setPaused } from '../queues/admin.ts';
import type { Queues } from '../queues/queues.ts';
import { AddressGuard } from './address-guard.ts';
import { type Attempt, recordAttempts } from './attempts.ts';
import {
  type EndpointSettings,
  type EndpointWithSecrets,
  type Mode,
  deleteEndpoint,
  insertEndpoint,
  listEndpoints,
  rotateSecret,
  updateEndpoint,
} from './endpoints.ts';
import { newSecret } from './signing.ts';
import { WebhookStats } from './stats.ts';
import { EndpointWorker } from './worker.ts';

export type WebhookConfig = Pick<
  Config,
  | 'webhooks'
  | 'webhookRetrySchedule'
  | 'webhookAllowAddresses'
  | 'webhookDisableAfterMs'
  | 'webhookSecretOverlapMs'
  | 'pollIntervalMs'
>;

export interface WebhooksOptions {
  db: Kysely<Database>;
  queues: Queues;
  follower: Follower;
  config: WebhookConfig;
  log: { warn(obj: object, msg?: string): void };
}

export interface NewEndpointInput extends EndpointSettings {
  name: string;
  streams: string[];
  types: string[] | null;
  mode: Mode;
  from: Cursor | 'earliest' | 'latest';
}

/** The stream subscription and the queue of an endpoint (one name for both). */
export const internalName = (endpoint: string): string => `webhook:${endpoint}`;

/** The jobs' backoff: unused (every retry is given its delay from the schedule), but required. */
const BACKOFF = '{"type":"fixed","delay":1,"max":1,"jitter":false}';

export class Webhooks {
  readonly guard: AddressGuard;
  readonly stats = new WebhookStats();
  readonly attempts: Batcher<Attempt, number | null | undefined>;
  private readonly workers = new Map<string, EndpointWorker>();
  /** Workers of endpoints disabled or deleted, finishing their deliveries in flight. */
  private readonly stopping = new Set<Promise<void>>();
  private readonly loop: Loop;
  private readonly db: Kysely<Database>;
  /** A change since the current refresh began: refresh again at once. */
  private dirty = false;

  constructor(private readonly opts: WebhooksOptions) {
    this.db = opts.db;
    this.guard = new AddressGuard(opts.config.webhookAllowAddresses.list);
    this.attempts = new Batcher(opts.db, { maxEvents: 1000, write: recordAttempts });
    this.loop = new Loop({
      pass: async () => {
        this.dirty = false;
        await this.refresh();
        return this.dirty ? null : opts.config.pollIntervalMs;
      },
      onError: (err) => opts.log.warn({ err: err.message }, 'webhook endpoints refresh failed; retrying'),
      intervalMs: opts.config.pollIntervalMs,
      maxBackoffMs: 30_000,
    });
  }

  start(): void {
    if (this.opts.config.webhooks) this.loop.start();
  }

  async stop(): Promise<void> {
    await this.loop.stop();
    await Promise.all([...[...this.workers.values()].map((w) => w.stop()), ...this.stopping]);
    this.workers.clear();
    await this.attempts.close();
  }

  /** Runs a refresh now (after a change here: this process's workers follow it at once). */
  changed(): void {
    this.dirty = true;
    this.loop.wake();
  }

  /** One worker per enabled endpoint, each with the endpoint's current settings. */
  private async refresh(): Promise<void> {
    const endpoints = await listEndpoints(this.db, null);
    if (this.loop.stopping) return;
    const enabled = new Map(endpoints.filter((e) => e.enabled).map((e) => [e.name, e]));
    for (const [name, w] of this.workers) {
      if (enabled.has(name)) continue;
      this.workers.delete(name);
      const p = w.stop().finally(() => this.stopping.delete(p));
      this.stopping.add(p);
    }
    for (const e of enabled.values()) {
      const w = this.workers.get(e.name);
      if (w) {
        w.update(e);
        continue;
      }
      const worker = new EndpointWorker(e, internalName(e.name), {
        queues: this.opts.queues,
        guard: this.guard,
        attempts: this.attempts,
        scheduleMs: this.opts.config.webhookRetrySchedule,
        disableAfterMs: this.opts.config.webhookDisableAfterMs,
        disable: (name, reason) => this.disable(name, reason),
        stats: this.stats,
        log: this.opts.log,
      });
      this.workers.set(e.name, worker);
      worker.start();
    }
  }

  /** Creates an endpoint with its stream subscription and queue (409 `webhook_exists`). */
  async create(input: NewEndpointInput): Promise<EndpointWithSecrets> {
    const queue = internalName(input.name);
    const created = await inTransaction(this.db, async (trx) => {
      const e = await insertEndpoint(trx, { ...input, secret: newSecret() });
      if (!e) {
        throw new ApiError(
          409,
          'webhook_exists',
          `a webhook endpoint named ${input.name} exists; delete it first, or choose another name`,
        );
      }
      await createStreamSubscription(trx, {
        name: queue,
        stream: input.streams.join(','),
        streams: input.streams,
        type: null,
        types: input.types ?? undefined,
        group: input.mode === 'ordered' ? queue : undefined,
        queue,
        priority: 0,
        maxAttempts: this.opts.config.webhookRetrySchedule.length,
        backoff: BACKOFF,
        from: input.from,
      });
      await setPaused(trx, queue, !input.enabled, { create: true });
      return e;
    });
    this.opts.follower.wake();
    this.changed();
    return created;
  }

  /** Changes an endpoint's settings; enabling resumes its queue, disabling pauses it. */
  async update(
    name: string,
    patch: Partial<EndpointSettings>,
    reason?: string,
  ): Promise<EndpointWithSecrets> {
    const e = await inTransaction(this.db, async (trx) => {
      const e = await updateEndpoint(trx, name, { ...patch, disabledReason: reason });
      if (!e) throw notFound(name);
      if (patch.enabled !== undefined)
        await setPaused(trx, internalName(name), !patch.enabled, { create: true });
      return e;
    });
    this.opts.queues.feed.tailer.wake();
    if (e.enabled) this.workers.get(name)?.update(e);
    this.changed();
    return e;
  }

  /** Disables an endpoint (a 410, or failing too long), logged with the reason. */
  async disable(name: string, reason: string): Promise<void> {
    const [e] = await listEndpoints(this.db, name);
    if (!e?.enabled) return;
    await this.update(name, { enabled: false }, reason);
    this.stats.disabled++;
    this.opts.log.warn({ endpoint: name, reason }, 'webhook endpoint disabled');
  }

  async rotate(name: string, overlapMs: number | undefined): Promise<EndpointWithSecrets> {
    const e = await rotateSecret(
      this.db,
      name,
      newSecret(),
      overlapMs ?? this.opts.config.webhookSecretOverlapMs,
    );
    if (!e) throw notFound(name);
    // This process signs with the new secret from the next delivery on; others at their next refresh.
    this.workers.get(name)?.update(e);
    this.changed();
    return e;
  }

  async remove(name: string): Promise<void> {
    const queue = internalName(name);
    const gone = await inTransaction(this.db, async (trx: Db) => {
      if (!(await deleteEndpoint(trx, name, queue))) return false;
      await deleteStreamSubscription(trx, queue);
      return true;
    });
    if (!gone) throw notFound(name);
    this.changed();
  }

  /** One endpoint, or 404. */
  async get(name: string): Promise<EndpointWithSecrets> {
    const [e] = await listEndpoints(this.db, name);
    if (!e) throw notFound(name);
    return e;
  }
}

export const notFound = (name: string) =>
  new ApiError(404, 'webhook_not_found', `no webhook endpoint named ${name}`);
