/**
 * Queue routes: enqueue, claim (with long-poll), ack/nack/extend with fenced leases, batch ack, stats,
 * dead letters and redrive, pause/resume. No SQL here: everything goes through the Queues service.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { authorize, authorizeQueueRead, canSeeQueue } from '../auth/policy.ts';
import type { Config } from '../config/config.ts';
import { ApiError } from '../errors.ts';
import { oneOrBatchRoute } from '../http/one-or-batch.ts';
import { START, formatCursor } from '../feed/cursor.ts';
import type { Feed } from '../feed/feed.ts';
import { givenCursor, safePosition } from '../http/read-position.ts';
import { openSseStream, primerFrame } from '../http/sse.ts';
import type { ClaimedJob } from './claim.ts';
import type { AckItem, LeaseRef, SettleResult } from './settle.ts';
import { queueStream } from './wake-stream.ts';
import type { Queues } from './queues.ts';
import { JOB_ID_PATTERN, jobParams, queueParams } from './schemas.ts';
import { watchQuery, watchResponse } from './schemas/activity.ts';
import {
  concurrencyBody,
  concurrencyResponse,
  deadQuery,
  deadResponse,
  listResponse,
  pauseResponse,
  retryResponse,
  statsResponse,
} from './schemas/admin.ts';
import { claimBody, claimResponse } from './schemas/claim.ts';
import { enqueueBody, enqueueResponse } from './schemas/enqueue.ts';
import { cancelResponse, jobResponse } from './schemas/job.ts';
import {
  ackBody,
  ackResponse,
  batchAckBody,
  batchAckResponse,
  extendBody,
  extendResponse,
  nackBody,
  nackResponse,
} from './schemas/settle.ts';
import { type JobBody, toJobInput } from './validate.ts';

type QueueReq = { Params: { queue: string } };
type JobReq<B> = { Params: { queue: string; id: string }; Body: B };

const JOB_ID_RE = new RegExp(JOB_ID_PATTERN);
const QUEUE_TAGS = ['queues'];

function jobRef(params: { queue: string; id: string }, lease: string): LeaseRef {
  if (!JOB_ID_RE.test(params.id)) {
    throw new ApiError(
      400,
      'invalid_id',
      `job id must be a decimal number (got ${JSON.stringify(params.id.slice(0, 40))})`,
    );
  }
  return { queue: params.queue, id: params.id, lease };
}

function check<T extends SettleResult | { ok: boolean }>(res: T): Extract<T, { ok: true }> {
  if (!res.ok) {
    const f = res as Extract<SettleResult, { ok: false }>;
    throw new ApiError(f.status, f.code, f.message);
  }
  return res as Extract<T, { ok: true }>;
}

const iso = (ms: number) => new Date(ms).toISOString();
const isoOrNull = (ms: number | null) => (ms === null ? 'null' : `"${iso(ms)}"`);

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

/** JSON for one claimed job, with `payload` passed through as stored (no parse, no re-serialise). */
function claimedJson(j: ClaimedJob): string {
  return `{"id":"${j.id}","payload":${j.payload},"attempt":${j.attempt},"maxAttempts":${j.maxAttempts},"lease":"${j.lease}","leaseExpiresAt":"${iso(j.leaseExpiresAt)}"}`;
}

/** Acks as a request lists them (POST /ack, or a claim's `ack`); every result is bounded first, so an
 * oversized one fails the whole request before anything is acked. */
function ackItems(
  queue: string,
  body: readonly { id: string; lease: string; result?: unknown }[],
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
function ackResultsJson(items: readonly AckItem[], results: readonly SettleResult[]) {
  return results.map((r, n) =>
    r.ok
      ? { id: items[n].id, ok: true }
      : { id: items[n].id, ok: false, status: r.status, code: r.code, message: r.message },
  );
}

/** Lets bodiless POSTs (`curl -X POST`) through a body schema whose fields all have defaults. */
async function emptyBodyIsObject(request: FastifyRequest): Promise<void> {
  if (request.body === undefined || request.body === null) request.body = {};
}

/** Registers the queue routes on `app`; `queues` is built and closed by the server. */
export function queueRoutes(
  app: FastifyInstance,
  deps: { feed: Feed; queues: Queues; config: Config },
): void {
  const { config, queues } = deps;

  oneOrBatchRoute(app, {
    url: '/v1/queues/:queue/jobs',
    param: 'queue',
    action: 'enqueue',
    schema: {
      tags: QUEUE_TAGS,
      summary: 'Enqueue one job or a batch',
      params: queueParams,
      body: enqueueBody,
      response: enqueueResponse,
    },
    list: 'jobs',
    check: (queue, job: JobBody, where) => toJobInput(queue, job, config.maxEventBytes, where),
    write: (inputs) => queues.enqueue(inputs),
    show: (r) => ({ id: r.id, duplicate: r.duplicate }),
  });

  app.post<{
    Params: { queue: string };
    Body: {
      max: number;
      lease: number;
      wait: number;
      ack?: { id: string; lease: string; result?: unknown }[];
    };
  }>(
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
    async (request, reply) => {
      authorize(request, 'work', request.params.queue);
      const abort = new AbortController();
      reply.raw.on('close', () => abort.abort());
      const { max, lease, wait, ack } = request.body;
      // Acks first, so a worker's finished batch is settled (and its ordered groups or concurrency
      // slots released) before it asks for more; a failed ack does not stop the claim.
      const acks =
        ack && ack.length > 0 ? ackItems(request.params.queue, ack, config.maxJobResultBytes, 'ack') : null;
      const acked = acks ? ackResultsJson(acks, await queues.ack(acks)) : null;
      const jobs = await queues.claim(
        request.params.queue,
        { max, leaseSeconds: lease, waitSeconds: wait },
        abort.signal,
      );
      reply.type('application/json');
      const jobsJson = `[${jobs.map(claimedJson).join(',')}]`;
      return acked ? `{"jobs":${jobsJson},"acked":${JSON.stringify(acked)}}` : `{"jobs":${jobsJson}}`;
    },
  );

  app.post<JobReq<{ lease: string; result?: unknown }>>(
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
    async (request, reply) => {
      authorize(request, 'work', request.params.queue);
      const ref = jobRef(request.params, request.body.lease);
      const result = resultText(request.body.result, config.maxJobResultBytes, 'result');
      const [res] = await queues.ack([{ ...ref, result }]);
      check(res);
      return reply.code(204).send();
    },
  );

  app.post<JobReq<{ lease: string; error?: string; delay?: number }>>(
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
    async (request) => {
      authorize(request, 'work', request.params.queue);
      const { lease, error, delay } = request.body;
      const res = check(await queues.nack(jobRef(request.params, lease), error ?? null, delay ?? null));
      return { id: request.params.id, state: res.state, attempt: res.attempt, runAt: iso(res.runAt) };
    },
  );

  app.post<JobReq<{ lease: string; seconds: number }>>(
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
    async (request) => {
      authorize(request, 'work', request.params.queue);
      const { lease, seconds } = request.body;
      const res = check(await queues.extend(jobRef(request.params, lease), seconds));
      return { id: request.params.id, leaseExpiresAt: iso(res.leaseExpiresAt) };
    },
  );

  app.post<{ Params: { queue: string }; Body: { id: string; lease: string; result?: unknown }[] }>(
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
    async (request) => {
      const { queue } = request.params;
      authorize(request, 'work', queue);
      const items = ackItems(queue, request.body, config.maxJobResultBytes, '');
      return { results: ackResultsJson(items, await queues.ack(items)) };
    },
  );

  app.get<{ Params: { queue: string; id: string } }>(
    '/v1/queues/:queue/jobs/:id',
    {
      schema: {
        tags: QUEUE_TAGS,
        summary: "A job's state, attempts, last error, times and result",
        params: jobParams,
        response: jobResponse,
      },
    },
    async (request, reply) => {
      authorizeQueueRead(request, request.params.queue);
      const ref = jobRef(request.params, '');
      const j = await queues.getJob(ref.queue, ref.id);
      if (!j) {
        throw new ApiError(
          404,
          'job_not_found',
          `no job ${ref.id} in queue ${ref.queue}: it never existed, or it finished longer ago than JOB_RETENTION`,
        );
      }
      reply.type('application/json');
      // payload and result are passed through as stored (no parse, no re-serialise).
      return `{"id":"${j.id}","queue":${JSON.stringify(j.queue)},"state":"${j.state}","payload":${j.payload},"result":${j.result ?? 'null'},"group":${JSON.stringify(j.group)},"key":${JSON.stringify(j.key)},"priority":${j.priority},"attempt":${j.attempt},"maxAttempts":${j.maxAttempts},"lastError":${JSON.stringify(j.lastError)},"createdAt":${isoOrNull(j.createdAt)},"runAt":${isoOrNull(j.runAt)},"leaseExpiresAt":${isoOrNull(j.leaseExpiresAt)},"deadAt":${isoOrNull(j.deadAt)},"finishedAt":${isoOrNull(j.finishedAt)}}`;
    },
  );

  app.post<{ Params: { queue: string; id: string } }>(
    '/v1/queues/:queue/jobs/:id/cancel',
    {
      schema: {
        tags: QUEUE_TAGS,
        summary: 'Cancel a job no worker holds (409 job_leased when one does)',
        params: jobParams,
        response: cancelResponse,
      },
    },
    async (request) => {
      authorize(request, 'enqueue', request.params.queue);
      const ref = jobRef(request.params, '');
      check(await queues.cancel(ref.queue, ref.id));
      return { id: ref.id, state: 'cancelled' };
    },
  );

  app.post<{ Params: { queue: string }; Body: { limit: number | null } }>(
    '/v1/queues/:queue/concurrency',
    {
      config: { access: 'admin' },
      schema: {
        tags: QUEUE_TAGS,
        summary: 'Set the most jobs of the queue leased at once (null: no limit)',
        params: queueParams,
        body: concurrencyBody,
        response: concurrencyResponse,
      },
    },
    async (request) => {
      await queues.setConcurrency(request.params.queue, request.body.limit);
      return { queue: request.params.queue, concurrency: request.body.limit };
    },
  );

  app.get(
    '/v1/queues',
    { schema: { tags: QUEUE_TAGS, summary: 'Every queue with its counts', response: listResponse } },
    // Only the queues this token may enqueue to or work on (all of them for an admin).
    async (request) => ({ queues: (await queues.stats(null)).filter((q) => canSeeQueue(request, q.name)) }),
  );

  app.get<QueueReq>(
    '/v1/queues/:queue',
    {
      schema: {
        tags: QUEUE_TAGS,
        summary: 'Counts by state, oldest ready age, paused',
        params: queueParams,
        response: statsResponse,
      },
    },
    async (request) => {
      authorizeQueueRead(request, request.params.queue);
      const [stats] = await queues.stats(request.params.queue);
      if (!stats) {
        throw new ApiError(
          404,
          'queue_not_found',
          `no queue ${request.params.queue}: nothing was ever enqueued to it`,
        );
      }
      return stats;
    },
  );

  app.get<{ Params: { queue: string }; Querystring: { limit: number; after?: string } }>(
    '/v1/queues/:queue/dead',
    {
      config: { access: 'admin' },
      schema: {
        tags: QUEUE_TAGS,
        summary: 'Dead-lettered jobs, oldest first',
        params: queueParams,
        querystring: deadQuery,
        response: deadResponse,
      },
    },
    async (request, reply: FastifyReply) => {
      const { limit, after } = request.query;
      const jobs = await queues.listDead(request.params.queue, after ?? null, limit);
      const next = jobs.length > 0 ? jobs[jobs.length - 1].id : (after ?? null);
      const items = jobs.map(
        (j) =>
          `{"id":"${j.id}","payload":${j.payload},"attempt":${j.attempt},"maxAttempts":${j.maxAttempts},"lastError":${JSON.stringify(j.lastError)},"createdAt":"${iso(j.createdAt)}","deadAt":"${iso(j.deadAt)}"}`,
      );
      reply.type('application/json');
      return `{"jobs":[${items.join(',')}],"next":${JSON.stringify(next)}}`;
    },
  );

  app.post<{ Params: { queue: string; id: string } }>(
    '/v1/queues/:queue/dead/:id/retry',
    {
      config: { access: 'admin' },
      schema: {
        tags: QUEUE_TAGS,
        summary: 'Redrive one dead job',
        params: jobParams,
        response: retryResponse,
      },
    },
    async (request) => {
      const ref = jobRef(request.params, '');
      const ids = await queues.retryDead(ref.queue, ref.id);
      if (ids.length === 0) {
        throw new ApiError(404, 'job_not_found', `no dead job ${ref.id} in queue ${ref.queue}`);
      }
      return { id: ref.id, retried: 1 };
    },
  );

  app.post<QueueReq>(
    '/v1/queues/:queue/dead/retry',
    {
      config: { access: 'admin' },
      schema: {
        tags: QUEUE_TAGS,
        summary: 'Redrive every dead job of the queue',
        params: queueParams,
        response: retryResponse,
      },
    },
    async (request) => ({ retried: (await queues.retryDead(request.params.queue, null)).length }),
  );

  app.get<{ Params: { queue: string }; Querystring: { after?: string; from: 'earliest' | 'latest' } }>(
    '/v1/queues/:queue/events',
    {
      schema: {
        tags: QUEUE_TAGS,
        summary: 'Watch queue activity over SSE: enqueued, retry, dead, resumed',
        params: queueParams,
        querystring: watchQuery,
        response: watchResponse,
      },
    },
    async (request, reply) => {
      // Watching a queue: like its stats (enqueue, work or admin), whatever the cursor.
      authorizeQueueRead(request, request.params.queue);
      const start = givenCursor(request, request.query.after);
      const from =
        start ??
        (request.query.from === 'earliest' ? START : await safePosition(deps.feed, config.startWaitMs));
      const stream = openSseStream(request, reply, {
        retryMs: config.sseRetryMs,
        first: primerFrame(formatCursor(from)),
        room: { hub: deps.feed.hub, max: config.maxSseConnections },
        maxPerToken: config.maxSsePerToken,
      });
      const subscriber = deps.feed.hub.subscribe([queueStream(request.params.queue)], from, stream.sink);
      stream.onClose(() => deps.feed.hub.unsubscribe(subscriber));
      return reply;
    },
  );

  for (const action of ['pause', 'resume'] as const) {
    app.post<QueueReq>(
      `/v1/queues/:queue/${action}`,
      {
        config: { access: 'admin' },
        schema: {
          summary:
            action === 'pause' ? 'Stop handing out jobs (enqueues still accepted)' : 'Hand out jobs again',
          params: queueParams,
          response: pauseResponse,
        },
      },
      async (request) => {
        await queues.setPaused(request.params.queue, action === 'pause');
        return { queue: request.params.queue, paused: action === 'pause' };
      },
    );
  }
}
