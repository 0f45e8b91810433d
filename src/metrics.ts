/**
 * The kit every module registers its metrics with. Nothing here runs on the hot path: a module keeps
 * plain counters (`stats.x++`), and its metrics read them at scrape time. A module that knows a
 * metric registers it where it does the work, with a function beside it taking a `Metrics`
 * (e.g. `registerFeedMetrics(m, feed)`); src/ops/metrics.ts only builds the registry from the parts
 * the server hands it and serves `GET /metrics`.
 *
 * `aggregator` says how WORKERS > 1 combines the workers' values in the server-wide /metrics: sum by
 * default; `max` for figures every worker reads from the same database.
 */
import { Counter, Gauge, Histogram, type MetricType, Registry } from 'prom-client';

export type Aggregator = 'sum' | 'max' | 'min' | 'average';

/** Observations in fixed buckets, counted by a module itself (see Metrics.histogram). */
export interface Buckets {
  readonly bounds: readonly number[];
  readonly count: number;
  readonly sum: number;
  /** Observations ≤ each bound (Prometheus `le` buckets, without +Inf, which is `count`). */
  cumulative(): number[];
}

/** A part of the service that has metrics of its own. */
export interface Measured {
  registerMetrics(m: Metrics): void;
}

export class Metrics {
  readonly registry = new Registry();
  private generation = 0;

  /** Called as a scrape begins: perScrape reads made before it are stale. */
  nextScrape(): void {
    this.generation++;
  }

  /** A counter whose value is copied from `read()` at each scrape. */
  counter(name: string, help: string, read: () => number): void {
    new Counter({
      name,
      help,
      registers: [this.registry],
      collect() {
        this.reset();
        this.inc(read());
      },
    });
  }

  /** A gauge read at each scrape (an async read may query the database). */
  gauge(
    name: string,
    help: string,
    read: () => number | Promise<number>,
    aggregator: Aggregator = 'sum',
  ): void {
    new Gauge({
      name,
      help,
      aggregator,
      registers: [this.registry],
      async collect() {
        this.set(await read());
      },
    });
  }

  /** A labelled gauge: `collect` sets each series afresh at every scrape (none left from the last). */
  gauges<L extends string>(
    name: string,
    help: string,
    labelNames: readonly L[],
    collect: (set: (labels: Record<L, string>, value: number) => void) => void | Promise<void>,
    aggregator: Aggregator = 'sum',
  ): void {
    new Gauge({
      name,
      help,
      labelNames,
      aggregator,
      registers: [this.registry],
      async collect() {
        this.reset();
        await collect((labels, value) => this.set(labels, value));
      },
    });
  }

  /** A labelled counter copied from a module's own counts at each scrape. */
  counters<L extends string>(
    name: string,
    help: string,
    labelNames: readonly L[],
    collect: (add: (labels: Record<L, string>, value: number) => void) => void,
  ): void {
    new Counter({
      name,
      help,
      labelNames,
      registers: [this.registry],
      collect() {
        this.reset();
        collect((labels, value) => this.inc(labels, value));
      },
    });
  }

  /** A histogram whose buckets are copied from a module's own Buckets at each scrape. */
  histogram(name: string, help: string, read: () => Buckets): void {
    new MirroredHistogram({ name, help, registers: [this.registry] }, read);
  }

  /**
   * One database read per scrape, shared by the metrics that need it: the first to ask in a scrape
   * starts it, the others get the same answer; undefined when the read failed.
   */
  perScrape<T>(fetch: () => Promise<T>): () => Promise<T | undefined> {
    let at = -1;
    let p: Promise<T | undefined> = Promise.resolve(undefined);
    return () => {
      if (at !== this.generation) {
        at = this.generation;
        p = fetch().catch(() => undefined);
      }
      return p;
    };
  }
}

class MirroredHistogram extends Histogram {
  constructor(
    private readonly config: { name: string; help: string; registers: Registry[] },
    private readonly read: () => Buckets,
  ) {
    super({ ...config, buckets: [...read().bounds] });
  }

  // The registry formats a histogram from this method when it has one (prom-client's do), else get().
  async getForPromString() {
    return this.get();
  }

  override async get() {
    const { name, help } = this.config;
    const w = this.read();
    const cumulative = w.cumulative();
    const bucket = `${name}_bucket`;
    return {
      name,
      help,
      // prom-client's runtime type tags are strings; its typings declare a numeric enum.
      type: 'histogram' as unknown as MetricType,
      aggregator: 'sum' as const,
      collect: () => {},
      values: [
        ...w.bounds.map((le, i) => ({ labels: { le }, value: cumulative[i], metricName: bucket })),
        { labels: { le: '+Inf' }, value: w.count, metricName: bucket },
        { labels: {}, value: w.sum, metricName: `${name}_sum` },
        { labels: {}, value: w.count, metricName: `${name}_count` },
      ],
    };
  }
}
