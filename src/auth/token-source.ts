/**
 * Where a request's token comes from, first found wins: `Authorization: Bearer <jwt>`, the
 * `access_token` query parameter (EventSource cannot set headers), the `commitfeed_token` cookie.
 * `access_token` is removed from the query as it is read, so every route accepts it and no route
 * (nor its query schema) sees it.
 */
import type { FastifyRequest } from 'fastify';
import { unauthorized } from './policy.ts';

export const TOKEN_COOKIE = 'commitfeed_token';
export const TOKEN_QUERY = 'access_token';
/** Longer bearer strings are refused unread. */
const MAX_TOKEN_CHARS = 8192;

/** OpenAPI security schemes: the three ways to send a token (for the docs module). */
export const securitySchemes = {
  bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' },
  cookie: { type: 'apiKey', in: 'cookie', name: TOKEN_COOKIE },
  query: {
    type: 'apiKey',
    in: 'query',
    name: TOKEN_QUERY,
    description: 'for EventSource, which cannot set headers (the URL may be logged by proxies)',
  },
} as const;

/** Reads the token from the request, and takes `access_token` out of the query. */
export function takeToken(request: FastifyRequest): string | undefined {
  let found: unknown;
  const header = request.headers.authorization;
  if (header !== undefined) {
    const m = /^Bearer[ ]+(\S+)\s*$/i.exec(header);
    if (!m) throw unauthorized('Authorization must be "Bearer <jwt>"', true);
    found = m[1];
  }
  const query = request.query as Record<string, unknown> | undefined;
  if (query && typeof query === 'object' && TOKEN_QUERY in query) {
    found ??= query[TOKEN_QUERY];
    delete query[TOKEN_QUERY];
  }
  if (found === undefined && request.headers.cookie) found = cookie(request.headers.cookie, TOKEN_COOKIE);
  if (found === undefined) return undefined;
  if (typeof found !== 'string' || found === '' || found.length > MAX_TOKEN_CHARS) {
    throw unauthorized(`the token must be one compact JWT of at most ${MAX_TOKEN_CHARS} characters`, true);
  }
  return found;
}

function cookie(header: string, name: string): string | undefined {
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) {
      const v = part.slice(eq + 1).trim();
      try {
        return decodeURIComponent(v.startsWith('"') && v.endsWith('"') ? v.slice(1, -1) : v);
      } catch {
        return v;
      }
    }
  }
  return undefined;
}
