// `node --import ./test/ts-loader.mjs`: tap's test processes import TypeScript (test/ts-hooks.mjs).
import { register } from 'node:module';

register('./ts-hooks.mjs', import.meta.url);

// tap runs each test file with @tapjs/processinfo, and puts it in NODE_OPTIONS too, so that every node
// process a test starts records itself for coverage reports, which this suite turns off (package.json).
// It costs each node process ~0.3 s of CPU (its own module hooks thread), and the tests start many
// (the service, queue workers, `npm start`, the chaos tests' processes): they start without it.
const options = process.env.NODE_OPTIONS;
if (options?.includes('@tapjs/processinfo')) {
  const rest = options
    .split(/\s+/)
    .filter((o) => !o.includes('@tapjs/processinfo'))
    .join(' ');
  if (rest) process.env.NODE_OPTIONS = rest;
  else delete process.env.NODE_OPTIONS;
}
