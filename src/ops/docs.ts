/**
 * OpenAPI from the route schemas (the single source: validation, serialisation and docs): the spec at
 * `/openapi.json`, a human page at `/docs`. Register before any route: @fastify/swagger collects routes
 * with an onRoute hook, so a route added before it is missing from the spec.
 */
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance, FastifySchema } from 'fastify';
import { securitySchemes } from '../auth/token-source.ts';
import { errorSchema } from '../http/errors.ts';

/** `tags`: those of optional route groups served by this app, listed after the core ones. */
export async function registerDocs(
  app: FastifyInstance,
  tags: readonly { name: string; description: string }[] = [],
): Promise<void> {
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'commitfeed',
        version: '0.1.0',
        description:
          'Event streams and work queues on PostgreSQL over HTTP. Errors are `{statusCode, error, code, message}` with a ' +
          'stable `code`; 503 answers carry `Retry-After`. SSE reads resume exactly with `Last-Event-ID`.',
      },
      tags: [
        { name: 'streams', description: 'publish and read events' },
        { name: 'queues', description: 'work queues with leases' },
        { name: 'transactions', description: 'several operations in one transaction' },
        { name: 'ops', description: 'health and metrics' },
        ...tags,
      ],
      // Access control (src/auth): a JWT by any of these; `{}`: none needed when auth is off and on
      // public routes (health, docs, the live page).
      components: { securitySchemes },
      security: [{ bearer: [] }, { cookie: [] }, { query: [] }, {}],
    },
    // Documentation only (validation and serialisation are untouched): any route can fail with the
    // shared 500 shape (routes without response schemas keep the plugin's default 200 instead).
    // Routes without tags are grouped by path.
    transform: ({ schema, url }) => {
      let s = (schema ?? {}) as FastifySchema & { response?: Record<string, unknown> };
      if (s.hide) return { schema: s, url };
      if (!s.tags) s = { ...s, tags: [tagOf(url)] };
      if (s.response && !s.response['500']) s = { ...s, response: { ...s.response, 500: errorSchema } };
      return { schema: s, url };
    },
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });
  app.get('/openapi.json', { schema: { hide: true } }, () => app.swagger());
}

function tagOf(url: string): string {
  if (url.startsWith('/v1/queues')) return 'queues';
  if (url.startsWith('/v1/tx') || url.startsWith('/v1/transactions')) return 'transactions';
  if (url.startsWith('/v1/streams') || url.startsWith('/v1/events')) return 'streams';
  return 'ops';
}
