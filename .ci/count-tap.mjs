// Reads TAP from stdin (tap --reporter=tap), echoes it, and prints "tests: N passed, N failed" counting
// each test file's top-level subtests; a file that fails outside any subtest counts as one failure.
import { createInterface } from 'node:readline';

let passed = 0;
let failed = 0;
let fileFailures = 0;
const rl = createInterface({ input: process.stdin });
for await (const line of rl) {
  console.log(line);
  const sub = /^ {4}(not )?ok \d+ /.exec(line);
  if (sub) {
    if (sub[1]) {
      failed++;
      fileFailures++;
    } else passed++;
    continue;
  }
  const file = /^(not )?ok \d+ /.exec(line);
  if (file) {
    if (file[1] && fileFailures === 0) failed++;
    fileFailures = 0;
  }
}
console.log(`\ntests: ${passed} passed, ${failed} failed`);
