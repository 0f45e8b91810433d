/**
 * Who may do what: which routes are public, and the checks routes call for the streams and queues
 * they touch (401 without a token, 403 when the token does not allow it, each with the
 * WWW-Authenticate challenge RFC 6750 asks for).
 */
import type { FastifyRequest } from 'fastify';
import { ApiError } from '../errors.ts';
import type { Action } from './tokens.ts';

/** Paths owned by other modules that need no token. `/docs` covers the docs UI's assets. */
const PUBLIC_PATHS = new Set(['/', '/healthz', '/readyz', '/openapi.json']);
const PUBLIC_PREFIXES = ['/docs'];

const CHALLENGE = 'Bearer realm="commitfeed"';

export function unauthorized(message: string, invalid: boolean): ApiError {
  return new ApiError(401, 'unauthorized', message, {
    'www-authenticate': invalid ? `${CHALLENGE}, error="invalid_token"` : CHALLENGE,
  });
}

export function forbidden(message: string): ApiError {
  return new ApiError(403, 'forbidden', message, {
    'www-authenticate': `${CHALLENGE}, error="insufficient_scope"`,
  });
}

const WHAT: Record<Action, string> = {
  publish: 'publish to stream',
  subscribe: 'read stream',
  enqueue: 'enqueue to queue',
  work: 'work on queue',
};

/**
 * Throws 401/403 unless the request's token allows `action` on every name (a stream or queue).
 * Call it before anything is written or streamed.
 *
 * @example authorize(request, 'subscribe', ['orders', 'payments']);
 */
export function authorize(request: FastifyRequest, action: Action, names: string | readonly string[]): void {
  const p = request.principal;
  if (p === undefined) throw unauthorized('this request needs a token (Authorization: Bearer <jwt>)', false);
  for (const name of typeof names === 'string' ? [names] : names) {
    if (!p.can(action, name)) {
      throw forbidden(`this token may not ${WHAT[action]} ${JSON.stringify(name.slice(0, 200))}`);
    }
  }
}

/** May this request read stream `stream` (for listings that should not reveal other streams). */
export function canSubscribe(request: FastifyRequest, stream: string): boolean {
  return request.principal?.can('subscribe', stream) === true;
}

/** May this request see queue `queue` (its stats): an admin, or a token that may enqueue to it or
 * work on it. */
export function canSeeQueue(request: FastifyRequest, queue: string): boolean {
  const p = request.principal;
  return p !== undefined && (p.admin || p.can('enqueue', queue) || p.can('work', queue));
}

/** Throws 401/403 unless `canSeeQueue`. */
export function authorizeQueueRead(request: FastifyRequest, queue: string): void {
  if (request.principal === undefined) {
    throw unauthorized('this request needs a token (Authorization: Bearer <jwt>)', false);
  }
  if (!canSeeQueue(request, queue)) {
    throw forbidden(
      `this token may neither enqueue to nor work on queue ${JSON.stringify(queue.slice(0, 200))}`,
    );
  }
}

/** Throws 401/403 unless the token has `admin: true`. */
export function authorizeAdmin(request: FastifyRequest): void {
  const p = request.principal;
  if (p === undefined) throw unauthorized('this request needs a token (Authorization: Bearer <jwt>)', false);
  if (!p.admin) throw forbidden('this needs a token with admin: true');
}

/** Needs no token: `config: { access: 'public' }`, CORS preflights, 404s and PUBLIC_PATHS. */
export function isPublic(request: FastifyRequest): boolean {
  const opts = request.routeOptions;
  if (opts.config?.access === 'public' || request.method === 'OPTIONS') return true;
  const url = opts.url;
  // No route: the 404 handler answers.
  if (url === undefined) return true;
  return PUBLIC_PATHS.has(url) || PUBLIC_PREFIXES.some((p) => url === p || url.startsWith(`${p}/`));
}
