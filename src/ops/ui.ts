/**
 * The live page at `/`: plain HTML and a little JS (public/index.html), no build step. Its data comes
 * from one SSE stream, GET /v1/ops/live (live.ts), fed by the sampler; it tails a stream with the
 * browser's native EventSource. The chart library (uPlot, MIT) is served from the package's own
 * dependencies under /ui/, so the page works offline; both are public, like the page itself.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
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

/** uPlot's dist/ folder, found the way Node resolves the dependency. */
function uplotDist(): string {
  const require = createRequire(import.meta.url);
  return join(dirname(require.resolve('uplot/package.json')), 'dist');
}

export function uiRoutes(app: FastifyInstance): void {
  const html = readFileSync(pagePath(), 'utf8');
  const dist = uplotDist();
  const assets = {
    '/ui/uplot.js': ['application/javascript; charset=utf-8', readFileSync(join(dist, 'uPlot.iife.min.js'))],
    '/ui/uplot.css': ['text/css; charset=utf-8', readFileSync(join(dist, 'uPlot.min.css'))],
  } as const;
  app.get('/', { schema: { hide: true } }, (_request, reply) =>
    reply.type('text/html; charset=utf-8').header('cache-control', 'no-cache').send(html),
  );
  for (const [url, [type, body]] of Object.entries(assets)) {
    app.get(url, { schema: { hide: true }, config: { access: 'public' } }, (_request, reply) =>
      reply.type(type).header('cache-control', 'public, max-age=86400').send(body),
    );
  }
}
