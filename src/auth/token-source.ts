/**
 * Where a request's token comes from, first found wins: `Authorization: Bearer <jwt>`, the
 * `access_token` query parameter (EventSource cannot set headers), the `commitfeed_token` cookie.
 * `access_token` is removed from the query as it is read, so every route accepts it and no route
 * (nor its query schema) sees it; the request's URL is rewritten through redactUrl then, so nothing
 * that logs the URL later (request logs, error messages) can print the token.
 *
 * redactUrl is the one function every URL goes through before it can be logged (the request log
 * serializer in redact.ts uses it too): every query parameter whose name decodes to `access_token`,
 * or to `authorization` (the Mercure hub's 0.x token parameter, in compatibility mode), keeps its
 * name and loses its value, whatever its spelling (percent-encoded in either hex case, `+` for space,
 * any letter case). The query parser decodes names before the token is looked up, so matching the
 * literal text `access_token=` would miss spellings that still authenticate. The request's own URL is
 * rewritten for `access_token` only: the hub reads `authorization` from it.
 */
import type { FastifyRequest } from 'fastify';
import { unauthorized } from './policy.ts';

export const TOKEN_COOKIE = 'commitfeed_token';
export const TOKEN_QUERY = 'access_token';
/** Query parameters whose values never reach a log: the native token, and the Mercure hub's 0.x one. */
export const SECRET_PARAMS: readonly string[] = [TOKEN_QUERY, 'authorization'];
/** Longer bearer strings are refused unread. */
export const MAX_TOKEN_CHARS = 8192;

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

/** A query-string name as the query parser reads it; undecodable escapes are decoded one by one. */
function decodeName(raw: string): string {
  const plus = raw.replace(/\+/g, ' ');
  try {
    return decodeURIComponent(plus);
  } catch {
    return plus.replace(/%([0-9a-fA-F]{2})/g, (_, hex: string) =>
      String.fromCharCode(Number.parseInt(hex, 16)),
    );
  }
}

/**
 * The URL with the value of every parameter named in `names` (by default SECRET_PARAMS) replaced by
 * `[redacted]`.
 *
 * @example redactUrl('/v1/events?access%5Ftoken=eyJ...&stream=a') // '/v1/events?access%5Ftoken=[redacted]&stream=a'
 */
export function redactUrl(url: string, names: readonly string[] = SECRET_PARAMS): string {
  const q = url.indexOf('?');
  if (q < 0) return url;
  const hash = url.indexOf('#', q);
  const end = hash < 0 ? url.length : hash;
  let changed = false;
  const pairs = url
    .slice(q + 1, end)
    .split('&')
    .map((pair) => {
      const eq = pair.indexOf('=');
      const name = eq < 0 ? pair : pair.slice(0, eq);
      if (eq < 0 || !names.includes(decodeName(name).toLowerCase())) return pair;
      changed = true;
      return `${name}=[redacted]`;
    });
  return changed ? `${url.slice(0, q + 1)}${pairs.join('&')}${url.slice(end)}` : url;
}

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
    if (request.raw.url !== undefined) request.raw.url = redactUrl(request.raw.url, [TOKEN_QUERY]);
  }
  if (found === undefined && request.headers.cookie) found = readCookie(request.headers.cookie, TOKEN_COOKIE);
  if (found === undefined) return undefined;
  if (typeof found !== 'string' || found === '' || found.length > MAX_TOKEN_CHARS) {
    throw unauthorized(`the token must be one compact JWT of at most ${MAX_TOKEN_CHARS} characters`, true);
  }
  return found;
}

/** The value of cookie `name` in a Cookie header (first one wins), percent-decoded. */
export function readCookie(header: string, name: string): string | undefined {
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
