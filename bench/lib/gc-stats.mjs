// Preload for a bench server (`--import`; bench/experiments/cpu-ab.ts --gc): what the garbage
// collector costs it.
// Young collections (scavenges) copy what is alive at that moment and promote what survives twice
// into the old generation, where only a full collection frees it. An object that lives a little
// too long, or that something stale in the old generation still points at, is copied and promoted
// on every request: bench/HISTORY.md, "Promoted garbage". Counts every collection from the start;
// on SIGUSR2 writes the running totals to GC_STATS_FILE, `seq` going up by one per write, so the
// bench reads a figure for each measured turn as the difference of two writes.
import { writeFileSync } from 'node:fs';
import { GCProfiler } from 'node:v8';

const file = process.env.GC_STATS_FILE;
if (!file) throw new Error('gc-stats.mjs: set GC_STATS_FILE');
const totals = { seq: 0, scavenges: 0, scavengeUs: 0, promotedBytes: 0, full: 0, fullUs: 0 };
/** Bytes in the spaces a scavenge promotes into. */
const oldBytes = (at) =>
  at.heapSpaceStatistics.reduce(
    (n, s) => (s.spaceName === 'old_space' || s.spaceName === 'large_object_space' ? n + s.spaceUsedSize : n),
    0,
  );
let profiler = new GCProfiler();
profiler.start();
process.on('SIGUSR2', () => {
  const { statistics } = profiler.stop();
  profiler = new GCProfiler();
  profiler.start();
  for (const gc of statistics) {
    if (gc.gcType === 'Scavenge') {
      totals.scavenges++;
      totals.scavengeUs += gc.cost;
      totals.promotedBytes += Math.max(0, oldBytes(gc.afterGC) - oldBytes(gc.beforeGC));
    } else {
      // MarkSweepCompact, and the incremental marking steps that lead to it.
      if (gc.gcType === 'MarkSweepCompact') totals.full++;
      totals.fullUs += gc.cost;
    }
  }
  totals.seq++;
  writeFileSync(file, JSON.stringify(totals));
});
