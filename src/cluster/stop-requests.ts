/**
 * How a server process (a single server, or a cluster's primary) learns that it should stop: SIGTERM
 * (a supervisor, `kill`), SIGINT (Ctrl-C, which the terminal sends to the whole foreground process
 * group), SIGHUP (its terminal closed; Node's default would end the process at once, leaving the
 * embedded PostgreSQL and the requests in flight behind) — and, under npm, npm going away.
 *
 * `npm start` runs the service as npm's own child (`exec` in the script: no shell in between to swallow
 * signals). npm passes SIGTERM and SIGINT on and waits for the service, so its tree ends together; but
 * SIGHUP ends npm at once, and the service is re-parented. So a process started by npm watches its
 * parent and stops when npm is gone. Outside npm there is no such watch: a process started in the
 * background by a script that then exits is meant to run on.
 */
import cluster from 'node:cluster';

/** How often a process started by npm checks that npm is still its parent. */
const PARENT_CHECK_MS = 500;

let current: ((why: object) => void) | undefined;

/**
 * Calls `stop` (repeatedly: it must be idempotent) whenever this process is asked to stop. A later call
 * replaces the earlier `stop`: start-up has one (exit: nothing to drain yet), the running server another.
 */
export function onStopRequest(stop: (why: object) => void): void {
  if (current === undefined) listen();
  current = stop;
}

function listen(): void {
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const)
    process.on(signal, () => current?.({ signal }));
  if (process.env.npm_lifecycle_event === undefined || cluster.isWorker) return;
  const parent = process.ppid;
  setInterval(() => {
    if (process.ppid !== parent) current?.({ reason: `parent process ${parent} (npm) gone` });
  }, PARENT_CHECK_MS).unref();
}
