/**
 * The live page at `/`: plain HTML and a little JS (public/index.html), no build step. It lists
 * streams (GET /v1/streams) and queues (GET /v1/queues, when the service has queues), and tails a
 * stream with the browser's native EventSource, showing reconnects and the id it resumed from.
 */
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance } from 'fastify';

/** public/ sits at the package root: two levels up from src/ops, three from dist/src/ops. */
function pagePath(): string {
  for (const up of ['../../public/index.html', '../../../public/index.html']) {
    const p = fileURLToPath(new URL(up, import.meta.url));
    if (existsSync(p)) return p;
  }
  throw new Error('public/index.html not found next to the package: the live page cannot be served');
}

export function uiRoutes(app: FastifyInstance): void {
  const html = readFileSync(pagePath(), 'utf8');
  app.get('/', { schema: { hide: true } }, (_request, reply) =>
    reply.type('text/html; charset=utf-8').header('cache-control', 'no-cache').send(html),
  );
}
