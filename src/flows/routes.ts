/**
 * Routes of the flows into queues: stream subscriptions (`/v1/subscriptions`,
 * stream-subscription-routes.ts) and cron schedules (`/v1/schedules`, schedule-routes.ts). Both are
 * administration (admin tokens when access control is on). No SQL here.
 */
import type { FastifyInstance } from 'fastify';
import { type ScheduleRouteDeps, scheduleRoutes } from './schedule-routes.ts';
import {
  STREAM_SUBSCRIPTION_TAG,
  type StreamSubscriptionRouteDeps,
  streamSubscriptionRoutes,
} from './stream-subscription-routes.ts';

/** The OpenAPI tags these routes describe (given to the docs plugin, which is registered first). */
export const FLOW_TAGS = [STREAM_SUBSCRIPTION_TAG];

export function flowRoutes(
  app: FastifyInstance,
  deps: StreamSubscriptionRouteDeps & ScheduleRouteDeps,
): void {
  streamSubscriptionRoutes(app, deps);
  scheduleRoutes(app, deps);
}
