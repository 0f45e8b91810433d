/**
 * The commitfeed HTTP client (`import { CommitfeedClient } from 'commitfeed/client'`): publish,
 * subscribe with automatic resume, and queue helpers. Depends on nothing but `fetch`.
 */
export type { BackoffOptions } from './backoff.ts';
export { CommitfeedClient, type EventInit, type Published } from './client.ts';
export { CommitfeedError } from './errors.ts';
export type { ClientOptions } from './http.ts';
export type { ClaimOptions, Enqueued, EnqueueOptions, Job, JobRef } from './jobs.ts';
export { isPrimer, parseSse, type SseMessage, textChunks } from './sse.ts';
export {
  type ReconnectInfo,
  type ResetInfo,
  type StreamEvent,
  type SubscribeOptions,
  Subscription,
} from './subscription.ts';
export type { JobContext, Worker, WorkOptions } from './worker.ts';
