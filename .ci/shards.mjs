// CI: splits test files into N shards of about equal measured time, so the shards end together.
// Longest first, each to the shard with the least time so far; the times are .ci/test-times (tap's
// `# time=` per file in a CI run, refreshed by hand when files grow); a file not listed there counts
// as DEFAULT_S. Prints one line per shard, its files separated by spaces.
//
//   node .ci/shards.mjs 2 test/a.test.ts test/b.test.ts ...
import { readFileSync } from 'node:fs';

const DEFAULT_S = 8;
const [n, ...files] = process.argv.slice(2);
const count = Number(n);
if (!Number.isInteger(count) || count < 1 || files.length === 0) {
  console.error('usage: node .ci/shards.mjs N file...');
  process.exit(2);
}
const times = new Map();
for (const line of readFileSync(new URL('./test-times', import.meta.url), 'utf8').split('\n')) {
  const m = /^\s*([\d.]+)\s+(\S+)/.exec(line);
  if (m) times.set(m[2], Number(m[1]));
}
const shards = Array.from({ length: count }, () => ({ s: 0, files: [] }));
const byTime = [...files].sort((a, b) => (times.get(b) ?? DEFAULT_S) - (times.get(a) ?? DEFAULT_S));
for (const f of byTime) {
  const least = shards.reduce((a, b) => (b.s < a.s ? b : a));
  least.s += times.get(f) ?? DEFAULT_S;
  least.files.push(f);
}
for (const shard of shards) console.log(shard.files.sort().join(' '));
