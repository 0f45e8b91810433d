/**
 * The commitfeed HTTP client (`import { CommitfeedClient } from 'commitfeed/client'`): publish,
 * subscribe with automatic resume, and queue helpers. Depends on nothing but `fetch`.
 */
export {
  type BackoffOptions,
  type ClaimOptions,
  type ClientOptions,
  CommitfeedClient,
  CommitfeedError,
  type Enqueued,
  type EnqueueOptions,
  type EventInit,
  type Job,
  type JobContext,
  type JobRef,
  type Published,
  type ReconnectInfo,
  type ResetInfo,
  type StreamEvent,
  type SubscribeOptions,
  Subscription,
  type Worker,
  type WorkOptions,
} from './client.ts';
export { isPrimer, parseSse, type SseMessage, textChunks } from './sse.ts';
