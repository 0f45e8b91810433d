/**
 * A queue's wake-up stream: enqueues, retries, redrives and resumes append a small row to the feed
 * stream `queue/<name>` in the transaction that changes the jobs, so its pg_notify is delivered at that
 * commit and waiting claimers wake exactly when the change becomes visible (never for a rollback).
 * The row is a bare wake marker (claimers read the jobs table, not the feed).
 */
import type { EventInput } from '../feed/event.ts';

/** The feed stream that carries a queue's wake-ups. User stream names cannot contain '/'. */
export const queueStream = (queue: string): string => `queue/${queue}`;

/** The feed row that wakes `queue`'s claimers. */
export function wakeEvent(queue: string, type: string, data: string): EventInput {
  return { stream: queueStream(queue), type, key: null, data };
}
