/** One job by id: its status (GET), and cancelling it while no worker holds it. */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { authorize, authorizeQueueRead } from '../../auth/policy.ts';
import { ApiError } from '../../errors.ts';
import { type JobStatus, getJob } from '../admin.ts';
import { jobParams } from '../schemas.ts';
import { cancelResponse, jobResponse } from '../schemas/job.ts';
import { type JobReq, QUEUE_TAGS, type QueueRouteDeps, check, iso, jobRef } from './shared.ts';

export function jobRoutes(app: FastifyInstance, deps: QueueRouteDeps): void {
  app.get<JobReq>(
    '/v1/queues/:queue/jobs/:id',
    {
      schema: {
        tags: QUEUE_TAGS,
        summary: "A job's state, attempts, last error, times and result",
        params: jobParams,
        response: jobResponse,
      },
    },
    (request, reply) => jobStatus(deps, request, reply),
  );
  app.post<JobReq>(
    '/v1/queues/:queue/jobs/:id/cancel',
    {
      schema: {
        tags: QUEUE_TAGS,
        summary: 'Cancel a job no worker holds (409 job_leased when one does)',
        params: jobParams,
        response: cancelResponse,
      },
    },
    (request) => cancel(deps, request),
  );
}

async function jobStatus(deps: QueueRouteDeps, request: FastifyRequest<JobReq>, reply: FastifyReply) {
  authorizeQueueRead(request, request.params.queue);
  const ref = jobRef(request.params, '');
  const j = await getJob(deps.db, ref.queue, ref.id);
  if (!j) {
    throw new ApiError(
      404,
      'job_not_found',
      `no job ${ref.id} in queue ${ref.queue}: it never existed, or it finished longer ago than JOB_RETENTION`,
    );
  }
  reply.type('application/json');
  return jobJson(j);
}

const isoOrNull = (ms: number | null) => (ms === null ? 'null' : `"${iso(ms)}"`);

/** payload and result are passed through as stored (no parse, no re-serialise). */
function jobJson(j: JobStatus): string {
  return `{"id":"${j.id}","queue":${JSON.stringify(j.queue)},"state":"${j.state}","payload":${j.payload},"result":${j.result ?? 'null'},"group":${JSON.stringify(j.group)},"key":${JSON.stringify(j.key)},"priority":${j.priority},"attempt":${j.attempt},"maxAttempts":${j.maxAttempts},"lastError":${JSON.stringify(j.lastError)},"createdAt":${isoOrNull(j.createdAt)},"runAt":${isoOrNull(j.runAt)},"leaseExpiresAt":${isoOrNull(j.leaseExpiresAt)},"deadAt":${isoOrNull(j.deadAt)},"finishedAt":${isoOrNull(j.finishedAt)}}`;
}

/** Cancels the job, which stays readable as `cancelled`; 409 while a live lease holds it. */
async function cancel(deps: QueueRouteDeps, request: FastifyRequest<JobReq>) {
  authorize(request, 'enqueue', request.params.queue);
  const ref = jobRef(request.params, '');
  check(await deps.queues.cancel(ref.queue, ref.id));
  return { id: ref.id, state: 'cancelled' };
}
