/**
 * The worker side of WORKERS=N (src/cluster/primary.ts is the other): who this process is, telling the
 * primary it is ready, and answering the primary's requests for this process's metrics so that any
 * worker can serve `/metrics` for the whole server.
 *
 * Lifecycle: a worker is an ordinary server (startServer) plus these messages; outside a cluster every
 * function here is a no-op. Failure: a metrics request the primary does not answer in time (it is
 * gone, or busy) fails that scrape with 503 rather than hanging; a worker that dies mid-collection is
 * left out of the sum and the count of reporting workers says so.
 */
import cluster from 'node:cluster';
import type { Registry } from 'prom-client';

/** The messages between the primary and its workers (tagged `cf` so that others are ignored). */
export type ClusterMessage =
  | { cf: 'ready'; url: string }
  | { cf: 'metrics-request'; id: number }
  | { cf: 'metrics-collect'; id: number }
  | { cf: 'metrics-part'; id: number; metrics: MetricJson[] }
  | { cf: 'metrics-result'; id: number; parts: MetricJson[][]; workers: number };

/** One metric as `Registry.getMetricsAsJSON()` gives it (what AggregatorRegistry.aggregate sums). */
export type MetricJson = Awaited<ReturnType<Registry['getMetricsAsJSON']>>[number];

/** The environment variable that carries a worker's stable index (1..N, kept across restarts). */
export const WORKER_ENV = 'COMMITFEED_WORKER';

/** This worker's index, or undefined outside a cluster. */
export function workerIndex(): number | undefined {
  if (!cluster.isWorker) return undefined;
  const n = Number(process.env[WORKER_ENV]);
  return Number.isInteger(n) && n > 0 ? n : undefined;
}

export function isClusterMessage(m: unknown): m is ClusterMessage {
  return typeof m === 'object' && m !== null && typeof (m as { cf?: unknown }).cf === 'string';
}

/** Tells the primary this worker listens (its log line waits for all of them). */
export function notifyReady(url: string): void {
  if (workerIndex() !== undefined) process.send?.({ cf: 'ready', url } satisfies ClusterMessage);
}

let collect: (() => Promise<MetricJson[]>) | undefined;
let listening = false;
let nextId = 1;
const pending = new Map<number, (r: { parts: MetricJson[][]; workers: number }) => void>();

function onMessage(m: unknown): void {
  if (!isClusterMessage(m)) return;
  if (m.cf === 'metrics-collect') {
    const reply = (metrics: MetricJson[]) =>
      process.send?.({ cf: 'metrics-part', id: m.id, metrics } satisfies ClusterMessage);
    if (!collect) reply([]);
    else collect().then(reply, () => reply([]));
  } else if (m.cf === 'metrics-result') {
    pending.get(m.id)?.({ parts: m.parts, workers: m.workers });
    pending.delete(m.id);
  }
}

/** Registers how this process's metrics are read when the primary collects them. */
export function serveClusterMetrics(read: () => Promise<MetricJson[]>): void {
  if (workerIndex() === undefined) return;
  collect = read;
  if (!listening) {
    listening = true;
    process.on('message', onMessage);
  }
}

/**
 * Every worker's metrics, gathered by the primary (`workers`: how many it asked). Rejects after
 * `timeoutMs` when the primary does not answer.
 */
export function clusterMetrics(timeoutMs: number): Promise<{ parts: MetricJson[][]; workers: number }> {
  const id = nextId++;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      pending.delete(id);
      reject(new Error('the cluster primary did not answer the metrics request'));
    }, timeoutMs);
    pending.set(id, (r) => {
      clearTimeout(timer);
      resolve(r);
    });
    process.send?.({ cf: 'metrics-request', id } satisfies ClusterMessage);
  });
}
