/**
 * `GET /v1/ops/live`: the live page's one data source, an SSE stream of the sampler's ring. On connect
 * it sends the history (`event: history`), then each new sample as it is taken (`event: sample`, once a
 * second). It never queries the database: the sampler reads once per tick for every page, and each
 * connection only filters that sample for its token (user streams it may subscribe to, queues it may
 * see, and the service-wide series unless METRICS_REQUIRE_ADMIN keeps them for admins).
 *
 * Lifecycle: a connection watches the sampler (Sampler.watch) until the client leaves, its token expires
 * (`event: auth-expired`) or the server shuts down (a `retry:` hint, ended in preClose like the
 * streams). A client whose socket is full skips samples until it drains: it sees a gap, never an
 * unbounded buffer.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { canSeeQueue, canSubscribe } from '../auth/policy.ts';
import { errorSchema } from '../http/errors.ts';
import { openSseStream } from '../http/sse.ts';
import type { Sample, Sampler } from './sampler.ts';
import type { StreamRow } from './stream-activity.ts';

/** Streams sent per frame (the busiest, then the most recent). */
const MAX_STREAM_ROWS = 200;

export interface LiveDeps {
  sampler: Sampler;
  config: { metricsRequireAdmin: boolean; maxSsePerToken: number; sseRetryMs: number };
}

/** What one connection may see, decided once from its token (answers cached per name). */
function viewFor(request: FastifyRequest, metricsRequireAdmin: boolean) {
  const admin = request.principal?.admin === true;
  const global = admin || !metricsRequireAdmin;
  const cached = (check: (request: FastifyRequest, name: string) => boolean) => {
    const answers = new Map<string, boolean>();
    return (name: string) => {
      let ok = answers.get(name);
      if (ok === undefined) {
        ok = check(request, name);
        answers.set(name, ok);
      }
      return ok;
    };
  };
  const mayRead = cached(canSubscribe);
  const maySee = cached(canSeeQueue);
  const sample = (s: Sample): Partial<Sample> => {
    const queues = s.queues === null ? null : s.queues.filter((q) => maySee(q.name));
    if (global) return { ...s, queues };
    return { t: s.t, queues };
  };
  const streams = (rows: readonly StreamRow[]): StreamRow[] => {
    const out: StreamRow[] = [];
    for (const r of rows) {
      if (out.length >= MAX_STREAM_ROWS) break;
      if (mayRead(r.name)) out.push(r);
    }
    return out;
  };
  return { admin, global, sample, streams };
}

export function liveRoutes(app: FastifyInstance, deps: LiveDeps): void {
  const { sampler, config } = deps;
  // The stream table is sorted once per tick, for every connection of this app.
  let shared: { at: number; rows: StreamRow[] } = { at: -1, rows: [] };

  app.get(
    '/v1/ops/live',
    {
      schema: {
        tags: ['ops'],
        summary:
          "The live page's data: the last 10 minutes of once-a-second samples, then each new one (SSE)",
        description:
          'Service-wide rates, lag, SSE, tailer and horizon series, and per-queue depth and activity, ' +
          'filtered to what the token may see. Served from memory: open pages add no database queries.',
        response: {
          200: {
            type: 'string',
            description: 'text/event-stream: `history` once, then `sample` every second',
          },
          401: errorSchema,
          403: errorSchema,
          429: errorSchema,
        },
      },
    },
    async (request, reply) => {
      const view = viewFor(request, config.metricsRequireAdmin);
      const frame = (event: string, body: unknown) => `event: ${event}\ndata: ${JSON.stringify(body)}\n\n`;
      const stream = openSseStream(request, reply, {
        retryMs: config.sseRetryMs,
        first: frame('history', {
          intervalMs: sampler.intervalMs,
          capacity: sampler.capacity,
          admin: view.admin,
          global: view.global,
          samples: sampler.history().map(view.sample),
          streams: view.streams(sampler.streamRows()),
        }),
        maxPerToken: config.maxSsePerToken,
      });
      const { sink } = stream;
      let blocked = false;
      const unwatch = sampler.watch((s) => {
        if (blocked) return;
        if (shared.at !== s.t) shared = { at: s.t, rows: sampler.streamRows() };
        if (!sink.write(frame('sample', { sample: view.sample(s), streams: view.streams(shared.rows) }))) {
          blocked = true;
          void sink.drained().then(() => {
            blocked = false;
          });
        }
      });
      stream.onClose(unwatch);
      return reply;
    },
  );
}
