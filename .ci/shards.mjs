// CI: splits test files into N shards of about equal measured time, so the shards end together.
// Longest first, each to the shard with the least time so far; a file's time is its time in
// .ci/test-times (tap's `# time=`, which leaves out the test process's start-up; refreshed by hand
// when files grow; DEFAULT_S for a file not listed there) plus STARTUP_S for that start-up.
// Prints one line per shard, its files separated by spaces.
//
//   node .ci/shards.mjs 2 test/*.test.ts
import { readFileSync } from 'node:fs';

const DEFAULT_S = 8;
/** Starting a test process (node, tsx, tap and the service's modules) under CI's load. */
const STARTUP_S = 2.5;
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
const cost = (f) => (times.get(f) ?? DEFAULT_S) + STARTUP_S;
for (const f of [...files].sort((a, b) => cost(b) - cost(a))) {
  const least = shards.reduce((a, b) => (b.s < a.s ? b : a));
  least.s += cost(f);
  least.files.push(f);
}
for (const shard of shards) console.log(shard.files.sort().join(' '));
