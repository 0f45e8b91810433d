/**
 * A cluster's /metrics: the worker asked sends `metrics-request`; the primary asks every connected
 * worker (`metrics-collect`), each answers with its registry's JSON (`metrics-part`), and the asker
 * gets them all (`metrics-result`) to sum. A worker that does not answer within COLLECT_TIMEOUT_MS
 * (busy, dying) is left out of the sum rather than holding the scrape; the answer says how many
 * workers were asked.
 */
import type { Worker } from 'node:cluster';
import type { ClusterMessage, MetricJson } from './worker.ts';

const COLLECT_TIMEOUT_MS = 2_000;

interface Collection {
  parts: MetricJson[][];
  left: number;
  reply(): void;
}

export class MetricsCollections {
  private next = 1;
  private readonly open = new Map<number, Collection>();

  /** `asker` wants the metrics of `workers` (itself among them); `requestId` is the asker's own. */
  request(asker: Worker, requestId: number, workers: readonly Worker[]): void {
    const id = this.next++;
    const targets = workers.filter((x) => x.isConnected());
    const entry: Collection = {
      parts: [],
      left: targets.length,
      reply: () => {
        if (!this.open.delete(id)) return;
        clearTimeout(timer);
        if (!asker.isConnected()) return;
        const result: ClusterMessage = {
          cf: 'metrics-result',
          id: requestId,
          parts: entry.parts,
          workers: targets.length,
        };
        asker.send(result);
      },
    };
    const timer = setTimeout(entry.reply, COLLECT_TIMEOUT_MS);
    this.open.set(id, entry);
    for (const x of targets) x.send({ cf: 'metrics-collect', id } satisfies ClusterMessage);
    if (targets.length === 0) entry.reply();
  }

  /** One worker's answer to collection `id`. */
  part(id: number, metrics: MetricJson[]): void {
    const entry = this.open.get(id);
    if (!entry) return;
    if (metrics.length > 0) entry.parts.push(metrics);
    if (--entry.left === 0) entry.reply();
  }
}
