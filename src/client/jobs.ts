/** The queue API's jobs as the client sends and receives them. */

/** Job options, as the queue API takes them. */
export interface EnqueueOptions {
  /** Seconds before the job may run. */
  delay?: number;
  /** ISO time the job may run from. */
  runAt?: string | Date;
  /** Lower runs first (default 0). */
  priority?: number;
  /** Dedup key among this queue's jobs not yet completed. */
  key?: string;
  /** Attempts before the job is dead-lettered (server default 5). */
  maxAttempts?: number;
  backoff?: { type?: 'exponential' | 'fixed'; delay?: number; max?: number; jitter?: boolean };
}

export interface Enqueued {
  id: string;
  duplicate: boolean;
}

export interface Job<T = unknown> {
  id: string;
  payload: T;
  /** 1 on the first delivery. */
  attempt: number;
  maxAttempts?: number;
  /** The lease token: ack, nack and extend must present it. */
  lease: string;
  leaseExpiresAt: string;
}

/** What ack/nack/extend need: a job's id and the lease token its claim returned. */
export type JobRef = Pick<Job, 'id' | 'lease'>;

export interface ClaimOptions {
  /** Most jobs to claim (1–100, default 1). */
  max?: number;
  /** Seconds each claimed job is leased (default 30). */
  lease?: number;
  /** Long-poll seconds when nothing is claimable (0–30, default 0). */
  wait?: number;
}

/** A job as the enqueue endpoint takes it (`runAt` as ISO text). */
export function jobBody(payload: unknown, o: EnqueueOptions): Record<string, unknown> {
  const body: Record<string, unknown> = { payload, ...o };
  if (o.runAt instanceof Date) body.runAt = o.runAt.toISOString();
  return body;
}
