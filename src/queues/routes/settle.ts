/**
 * Settling claimed jobs: ack, nack and extend one job by the lease its claim returned, and ack many
 * at once (one result per item). A stale or wrong lease changes nothing (409).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { authorize } from '../../auth/policy.ts';
import { ApiError } from '../../errors.ts';
import { jobParams, queueParams } from '../schemas.ts';
import {
  ackBody,
  ackResponse,
  batchAckBody,
  batchAckResponse,
  extendBody,
  extendResponse,
  nackBody,
  nackResponse,
} from '../schemas/settle.ts';
import { type AckItem, type SettleResult, extendLease } from '../settle.ts';
import { type JobReq, QUEUE_TAGS, type QueueReq, type QueueRouteDeps, check, iso, jobRef } from './shared.ts';

/** One ack as a request lists it (POST /ack, or a claim's `ack`). */
export type AckBody = { id: string; lease: string; result?: unknown };

type AckReq = JobReq<{ lease: string; result?: unknown }>;
type NackReq = JobReq<{ lease: string; error?: string; delay?: number }>;
type ExtendReq = JobReq<{ lease: string; seconds: number }>;
type BatchAckReq = QueueReq & { Body: AckBody[] };

export function settleRoutes(app: FastifyInstance, deps: QueueRouteDeps): void {
  app.post<AckReq>(
    '/v1/queues/:queue/jobs/:id/ack',
    {
      schema: {
        tags: QUEUE_TAGS,
        summary: 'Complete a job held by this lease',
        params: jobParams,
        body: ackBody,
        response: ackResponse,
      },
    },
    (request, reply) => ack(deps, request, reply),
  );
  app.post<NackReq>(
    '/v1/queues/:queue/jobs/:id/nack',
    {
      schema: {
        tags: QUEUE_TAGS,
        summary: 'Fail a job: retry after a backoff, or dead-letter',
        params: jobParams,
        body: nackBody,
        response: nackResponse,
      },
    },
    (request) => nack(deps, request),
  );
  app.post<ExtendReq>(
    '/v1/queues/:queue/jobs/:id/extend',
    {
      schema: {
        tags: QUEUE_TAGS,
        summary: 'Extend a lease to `seconds` from now',
        params: jobParams,
        body: extendBody,
        response: extendResponse,
      },
    },
    (request) => extend(deps, request),
  );
  app.post<BatchAckReq>(
    '/v1/queues/:queue/ack',
    {
      schema: {
        tags: QUEUE_TAGS,
        summary: 'Ack many jobs; one result per item',
        params: queueParams,
        body: batchAckBody,
        response: batchAckResponse,
      },
    },
    (request) => batchAck(deps, request),
  );
}

/** Completes the job (204), keeping its result if one is given. */
async function ack(deps: QueueRouteDeps, request: FastifyRequest<AckReq>, reply: FastifyReply) {
  authorize(request, 'work', request.params.queue);
  const ref = jobRef(request.params, request.body.lease);
  const result = resultText(request.body.result, deps.config.maxJobResultBytes, 'result');
  const [res] = await deps.queues.ack([{ ...ref, result }]);
  check(res);
  return reply.code(204).send();
}

/** Fails this attempt: the job is retried after a backoff (or `delay`), or dead-lettered. */
async function nack(deps: QueueRouteDeps, request: FastifyRequest<NackReq>) {
  authorize(request, 'work', request.params.queue);
  const { lease, error, delay } = request.body;
  const res = check(await deps.queues.nack(jobRef(request.params, lease), error ?? null, delay ?? null));
  return { id: request.params.id, state: res.state, attempt: res.attempt, runAt: iso(res.runAt) };
}

/** Extends the lease to `seconds` from now (a worker's heartbeat on a long job). */
async function extend(deps: QueueRouteDeps, request: FastifyRequest<ExtendReq>) {
  authorize(request, 'work', request.params.queue);
  const { lease, seconds } = request.body;
  const res = check(await extendLease(deps.db, jobRef(request.params, lease), seconds));
  return { id: request.params.id, leaseExpiresAt: iso(res.leaseExpiresAt) };
}

/** Acks every item on its own: one result each, in order. */
async function batchAck(deps: QueueRouteDeps, request: FastifyRequest<BatchAckReq>) {
  const { queue } = request.params;
  authorize(request, 'work', queue);
  const items = ackItems(queue, request.body, deps.config.maxJobResultBytes, '');
  return { results: ackResultsJson(items, await deps.queues.ack(items)) };
}

/** A job's result as stored JSON text (null when none); over `maxBytes`: 413, nothing acked. */
function resultText(value: unknown, maxBytes: number, where: string): string | null {
  if (value === undefined) return null;
  const text = JSON.stringify(value);
  if (text.length * 3 > maxBytes && Buffer.byteLength(text) > maxBytes) {
    throw new ApiError(
      413,
      'result_too_large',
      `${where} is larger than ${maxBytes} bytes (MAX_JOB_RESULT_BYTES)`,
    );
  }
  return text;
}

/** Acks as a request lists them (POST /ack, or a claim's `ack`); every result is bounded first, so an
 * oversized one fails the whole request before anything is acked. */
export function ackItems(
  queue: string,
  body: readonly AckBody[],
  maxResultBytes: number,
  where: string,
): AckItem[] {
  return body.map((i, n) => ({
    queue,
    id: i.id,
    lease: i.lease,
    result: resultText(i.result, maxResultBytes, `${where}[${n}].result`),
  }));
}

/** One result per ack item, in order: `{id, ok}` or `{id, ok: false, status, code, message}`. */
export function ackResultsJson(items: readonly AckItem[], results: readonly SettleResult[]) {
  return results.map((r, n) =>
    r.ok
      ? { id: items[n].id, ok: true }
      : { id: items[n].id, ok: false, status: r.status, code: r.code, message: r.message },
  );
}
