/**
 * `GET /v1/ops/live`: the live page's one data source, an SSE stream of the sampler's ring. On connect
 * it sends the history (`event: history`), then each new sample as it is taken (`event: sample`, once a
 * second). It never queries the database: the sampler reads once per tick for every page, and each
 * connection only filters that sample for its token (user streams it may subscribe to, queues it may
 * see, and the service-wide series unless METRICS_REQUIRE_ADMIN keeps them for admins).
 *
 * Lifecycle: a connection holds a sampler subscription until the client leaves, its token expires
 * (`event: auth-expired`) or the server shuts down (a `retry:` hint, ended in preClose like the
 * streams). A client whose socket is full skips samples until it drains: it sees a gap, never an
 * unbounded buffer.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { canSeeQueue, canSubscribe } from '../auth/policy.ts';
import { admitSse } from '../auth/sse-admission.ts';
import { errorSchema } from '../http/errors.ts';
import { SSE_HEADERS } from '../http/sse.ts';
import type { Sample, Sampler, StreamRow } from './sampler.ts';

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
  const open = new Set<(frame: string) => void>();
  // The stream table is sorted once per tick, for every connection of this app.
  let shared: { at: number; rows: StreamRow[] } = { at: -1, rows: [] };
  app.addHook('preClose', async () => {
    for (const end of open) end(`retry: ${config.sseRetryMs}\n: server shutting down\n\n`);
  });

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
      const started = admitSse(request, reply, config.maxSsePerToken);
      reply.hijack();
      const res = reply.raw;
      res.writeHead(200, { ...SSE_HEADERS, ...(reply.getHeaders() as Record<string, string>) });
      // A HEAD gets the headers and ends: Node discards a HEAD's body, so a stream would never show.
      if (request.method === 'HEAD') {
        res.end();
        return reply;
      }
      const frame = (event: string, body: unknown) => `event: ${event}\ndata: ${JSON.stringify(body)}\n\n`;
      res.write(
        `retry: ${config.sseRetryMs}\n` +
          frame('history', {
            intervalMs: sampler.intervalMs,
            capacity: sampler.capacity,
            admin: view.admin,
            global: view.global,
            samples: sampler.history().map(view.sample),
            streams: view.streams(sampler.streamRows()),
          }),
      );
      let blocked = false;
      const unsubscribe = sampler.subscribe((s) => {
        if (res.destroyed || blocked) return;
        if (shared.at !== s.t) shared = { at: s.t, rows: sampler.streamRows() };
        if (!res.write(frame('sample', { sample: view.sample(s), streams: view.streams(shared.rows) }))) {
          blocked = true;
          res.once('drain', () => {
            blocked = false;
          });
        }
      });
      const end = (last: string) => {
        unsubscribe();
        open.delete(end);
        if (!res.writableEnded) res.end(last);
      };
      open.add(end);
      res.on('close', () => {
        unsubscribe();
        open.delete(end);
      });
      started(end);
      return reply;
    },
  );
}
