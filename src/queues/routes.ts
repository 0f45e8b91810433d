/**
 * The queue routes, one group a job (routes/): enqueue; claim (with long-poll); settle (ack, nack,
 * extend, batch ack) with fenced leases; one job's status and cancel; administration (counts,
 * concurrency, dead letters and redrive, pause/resume); the activity stream. Each group registers
 * named handlers. No SQL here: handlers call the Queues service, or an operation's statement.
 */
import type { FastifyInstance } from 'fastify';
import { activityRoutes } from './routes/activity.ts';
import { adminRoutes, deadLetterRoutes, pauseRoutes } from './routes/admin.ts';
import { claimRoutes } from './routes/claim.ts';
import { enqueueRoutes } from './routes/enqueue.ts';
import { jobRoutes } from './routes/job.ts';
import { settleRoutes } from './routes/settle.ts';
import type { QueueRouteDeps } from './routes/shared.ts';

/**
 * Registers the queue routes on `app`; `queues` is built and closed by the server. In this order:
 * it is the order of the paths in /openapi.json and on /docs.
 */
export function queueRoutes(app: FastifyInstance, deps: QueueRouteDeps): void {
  enqueueRoutes(app, deps);
  claimRoutes(app, deps);
  settleRoutes(app, deps);
  jobRoutes(app, deps);
  adminRoutes(app, deps);
  deadLetterRoutes(app, deps);
  activityRoutes(app, deps);
  pauseRoutes(app, deps);
}
