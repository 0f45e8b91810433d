// Reads TAP from stdin (tap --reporter=tap), echoes it, and prints "tests: N passed, N failed" counting
// each test file's top-level subtests; a file that fails outside any subtest counts as one failure.
// Before that line it names every failing subtest with its file (the log CI keeps may be cut), with
// what failed inside it (the failing assertions with their diagnostics, and the subtest's comments,
// such as the chaos verdict: without them a cut log says which test failed but not why), then lists
// the slowest test files (tap's `# time=` per file), where CI time goes.
import { createInterface } from 'node:readline';

let passed = 0;
let failed = 0;
let fileFailures = 0;
const fileTimes = [];
const failures = [];
let pending = [];
// The lines of the current top-level subtest, from which a failure's details are taken.
let current = [];
const rl = createInterface({ input: process.stdin });
for await (const line of rl) {
  console.log(line);
  const sub = /^ {4}(not )?ok \d+ /.exec(line);
  if (sub) {
    if (sub[1]) {
      failed++;
      fileFailures++;
      pending.push([line.trim(), ...details(current)].join('\n      '));
    } else passed++;
    current = [];
    continue;
  }
  current.push(line);
  const file = /^(not )?ok \d+ /.exec(line);
  const timed = /^(?:not )?ok \d+ - (\S+) # time=([\d.]+)ms/.exec(line);
  if (timed) fileTimes.push([timed[1], Number(timed[2])]);
  if (file) {
    const name = /^(?:not )?ok \d+ - (\S+)/.exec(line)?.[1] ?? '?';
    if (file[1] && fileFailures === 0) {
      failed++;
      pending.push('(the file itself failed)');
    }
    for (const f of pending) failures.push(`${name}: ${f}`);
    fileFailures = 0;
    pending = [];
    current = [];
  }
}

/** What failed inside a subtest: its comments and each failing assertion with its YAML block (40 lines at most). */
function details(lines) {
  const out = [];
  let inFailure = false;
  for (const l of lines) {
    const t = l.trim();
    if (/^not ok \d+/.test(t)) inFailure = true;
    else if (/^ok \d+/.test(t)) inFailure = false;
    if (inFailure || (t.startsWith('# ') && !t.startsWith('# Subtest') && !t.startsWith('# time=')))
      out.push(t);
    if (t === '...') inFailure = false;
  }
  return out.length > 40 ? [...out.slice(0, 40), `(${out.length - 40} more lines in the log)`] : out;
}
if (failures.length > 0) {
  console.log('\nfailing tests:');
  for (const f of failures) console.log(`  ${f}`);
}
fileTimes.sort((a, b) => b[1] - a[1]);
console.log('\nslowest test files:');
for (const [name, ms] of fileTimes.slice(0, 8))
  console.log(`  ${(ms / 1000).toFixed(1).padStart(6)} s  ${name}`);
console.log(`\ntests: ${passed} passed, ${failed} failed`);
