/**
 * `GET /metrics` in the Prometheus text format (prom-client). Every part of the server registers its
 * own metrics where it does the work (src/metrics.ts is the kit; e.g. src/feed/metrics.ts,
 * src/queues/metrics.ts); this file builds the registry from the parts the app is given, adds the
 * process's own (Node's default metrics, the worker's identity) and serves it, for one worker or,
 * with WORKERS > 1, summed over all of them. Each app has its own registry, so several servers in
 * one process (tests) do not collide.
 */
import type { FastifyInstance } from 'fastify';
import { AggregatorRegistry, Gauge, type Registry, collectDefaultMetrics } from 'prom-client';
import { type MetricJson, clusterMetrics, serveClusterMetrics, workerIndex } from '../cluster/worker.ts';
import { unavailable } from '../errors.ts';
import { type Measured, Metrics } from '../metrics.ts';

export interface MetricsDeps {
  /** Every part of the server that has metrics (the feed, the queues, the janitor, ...). */
  parts: readonly Measured[];
  /** METRICS_REQUIRE_ADMIN: with auth on, a token with `admin: true` is needed (else public). */
  config?: { metricsRequireAdmin: boolean };
}

/** The registry with every part's metrics, and `scrape()` (text) and `json()` (for the cluster's
 * sum), which render it with fresh per-scrape reads. */
export function buildRegistry(parts: readonly Measured[]): {
  registry: Registry;
  scrape(): Promise<string>;
  json(): Promise<MetricJson[]>;
} {
  const m = new Metrics();
  collectDefaultMetrics({ register: m.registry, prefix: 'commitfeed_' });
  for (const part of parts) part.registerMetrics(m);
  const worker = workerIndex();
  if (worker !== undefined) {
    m.gauges(
      'commitfeed_worker_info',
      'A worker of this server (WORKERS > 1), by index and pid; always 1',
      ['worker', 'pid'],
      (set) => set({ worker: String(worker), pid: String(process.pid) }, 1),
    );
  }
  return {
    registry: m.registry,
    scrape() {
      m.nextScrape();
      return m.registry.metrics();
    },
    json() {
      m.nextScrape();
      return m.registry.getMetricsAsJSON();
    },
  };
}

/**
 * With WORKERS > 1, the whole server's metrics: every worker's registry gathered through the primary
 * and combined (counters summed, database-wide gauges by `max`), plus how many workers answered.
 */
async function serverMetrics(): Promise<string> {
  let gathered: Awaited<ReturnType<typeof clusterMetrics>>;
  try {
    gathered = await clusterMetrics(5000);
  } catch (err) {
    throw unavailable(
      'unavailable',
      `${(err as Error).message}; retry, or ask one worker with ?scope=worker`,
    );
  }
  const all = AggregatorRegistry.aggregate(gathered.parts);
  const workers = new Gauge({
    name: 'commitfeed_workers',
    help: 'Workers of this server (state="running") and how many answered this scrape (state="reporting")',
    labelNames: ['state'],
    registers: [all],
  });
  workers.set({ state: 'running' }, gathered.workers);
  workers.set({ state: 'reporting' }, gathered.parts.length);
  return all.metrics();
}

/** Registers `GET /metrics`. */
export function metricsRoutes(app: FastifyInstance, deps: MetricsDeps): void {
  const { registry, scrape, json } = buildRegistry(deps.parts);
  // The last server built in a worker process answers the primary's collections (one per worker).
  serveClusterMetrics(json);
  const access = deps.config?.metricsRequireAdmin ? 'admin' : 'public';
  app.get<{ Querystring: { scope: 'server' | 'worker' } }>(
    '/metrics',
    {
      schema: {
        summary: 'Prometheus metrics',
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: {
            scope: {
              type: 'string',
              enum: ['server', 'worker'],
              default: 'server',
              description:
                'with WORKERS > 1: `server` combines every worker, `worker` is the one answering (see commitfeed_worker_info)',
            },
          },
        },
      },
      config: { access },
    },
    async (request, reply) => {
      reply.type(registry.contentType);
      if (request.query.scope === 'worker' || workerIndex() === undefined) return scrape();
      return serverMetrics();
    },
  );
}
