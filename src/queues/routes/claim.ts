/** POST /v1/queues/:queue/claim: claim jobs, long-polling when none is ready, after acking a batch. */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { authorize } from '../../auth/policy.ts';
import { afterCommit } from '../../db/commit-outcome.ts';
import type { ClaimedJob } from '../claim.ts';
import { queueParams } from '../schemas.ts';
import { claimBody, claimResponse } from '../schemas/claim.ts';
import { type AckBody, ackItems, ackResultsJson } from './settle.ts';
import { QUEUE_TAGS, type QueueReq, type QueueRouteDeps, iso } from './shared.ts';

type ClaimReq = QueueReq & { Body: { max: number; lease: number; wait: number; ack?: AckBody[] } };

export function claimRoutes(app: FastifyInstance, deps: QueueRouteDeps): void {
  app.post<ClaimReq>(
    '/v1/queues/:queue/claim',
    {
      schema: {
        tags: QUEUE_TAGS,
        summary: 'Claim jobs, long-polling up to `wait` seconds',
        params: queueParams,
        body: claimBody,
        response: claimResponse,
      },
      preValidation: emptyBodyIsObject,
    },
    (request, reply) => claim(deps, request, reply),
  );
}

/** Lets bodiless POSTs (`curl -X POST`) through a body schema whose fields all have defaults. */
async function emptyBodyIsObject(request: FastifyRequest): Promise<void> {
  if (request.body === undefined || request.body === null) request.body = {};
}

/** Acks the jobs the body lists, then claims up to `max`, waiting up to `wait` seconds for some. */
async function claim(deps: QueueRouteDeps, request: FastifyRequest<ClaimReq>, reply: FastifyReply) {
  const { config, queues } = deps;
  authorize(request, 'work', request.params.queue);
  const abort = new AbortController();
  reply.raw.on('close', () => abort.abort());
  const { max, lease, wait, ack } = request.body;
  // Acks first, so a worker's finished batch is settled (and its ordered groups or concurrency
  // slots released) before it asks for more; a failed ack does not stop the claim.
  const acks =
    ack && ack.length > 0 ? ackItems(request.params.queue, ack, config.maxJobResultBytes, 'ack') : null;
  const acked = acks ? ackResultsJson(acks, await queues.ack(acks)) : null;
  const claim = () =>
    queues.claim(request.params.queue, { max, leaseSeconds: lease, waitSeconds: wait }, abort.signal);
  // The acks are committed: a claim that finds the database gone must not answer "nothing stored".
  const { jobs, paused } = await (acked ? afterCommit(claim) : claim());
  reply.type('application/json');
  // `paused` only when true: an empty answer from a queue that is not paused stays `{"jobs":[]}`.
  const fields = [`"jobs":[${jobs.map(claimedJson).join(',')}]`];
  if (paused) fields.push('"paused":true');
  if (acked) fields.push(`"acked":${JSON.stringify(acked)}`);
  return `{${fields.join(',')}}`;
}

/** JSON for one claimed job, with `payload` passed through as stored (no parse, no re-serialise). */
function claimedJson(j: ClaimedJob): string {
  return `{"id":"${j.id}","payload":${j.payload},"attempt":${j.attempt},"maxAttempts":${j.maxAttempts},"lease":"${j.lease}","leaseExpiresAt":"${iso(j.leaseExpiresAt)}"}`;
}
