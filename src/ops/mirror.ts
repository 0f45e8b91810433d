/**
 * Metrics mirrored from a module's own plain counters: the module counts on its hot path with `++`
 * and /metrics copies the value at scrape time (src/ops/metrics.ts, src/flows/metrics.ts).
 */
import { Counter, type Registry } from 'prom-client';

/** A counter in `registry` whose value is copied from `read()` at each scrape. */
export function mirrorCounter(registry: Registry, name: string, help: string, read: () => number): Counter {
  return new Counter({
    name,
    help,
    registers: [registry],
    collect() {
      this.reset();
      this.inc(read());
    },
  });
}
