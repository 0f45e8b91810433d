/**
 * Access control for every route: CORS, the token of each request, and the one check routes call.
 *
 * - Mode (`AUTH`): `jwt` when any key is configured (deny by default: every route needs a valid
 *   token unless it is public); `off` only when asked for, or when no key is configured and HOST is a
 *   loopback address (a loud warning at start-up either way). A non-loopback HOST without keys and
 *   without `AUTH=off` refuses to start.
 * - Token sources, first found wins: `Authorization: Bearer <jwt>`, the `access_token` query
 *   parameter (EventSource cannot set headers), the `commitfeed_token` cookie. `access_token` is
 *   removed from the query before validation, so every route accepts it and no route sees it.
 * - onRequest (before the body is read): a protected route without a valid token is a 401; a route
 *   with `config: { access: 'admin' }` also needs `admin: true` (403). Routes then call
 *   `authorize(request, action, names)` for the streams or queues they touch (403).
 * - SSE: `admitSse` enforces the per-token connection limit (429) before the stream opens, ends the
 *   stream with `event: auth-expired` when the token expires, and frees the slot on close.
 *
 * Public routes: `config: { access: 'public' }`, CORS preflights, 404s, and the paths in
 * PUBLIC_PATHS (health, the live page and the API docs, whose routes other modules own).
 */
import cors from '@fastify/cors';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../config.ts';
import { ApiError } from '../http/errors.ts';
import {
  type Action,
  OPEN,
  type Principal,
  TokenError,
  type Verifier,
  createVerifier,
  hasKeys,
} from './tokens.ts';

declare module 'fastify' {
  interface FastifyRequest {
    /** Who is asking: OPEN when auth is off, undefined on a public route without a valid token. */
    principal: Principal | undefined;
  }
  interface FastifyContextConfig {
    /** 'public': no token needed; 'admin': a token with `admin: true`. Default: any valid token,
     * then `authorize()` in the handler for the names the route touches. */
    access?: 'public' | 'admin';
  }
  interface FastifyInstance {
    sseByToken: Map<string, number>;
  }
}

export const TOKEN_COOKIE = 'commitfeed_token';
export const TOKEN_QUERY = 'access_token';
/** Longer bearer strings are refused unread. */
const MAX_TOKEN_CHARS = 8192;

/** Paths owned by other modules that need no token. `/docs` covers the docs UI's assets. */
const PUBLIC_PATHS = new Set(['/', '/healthz', '/readyz', '/openapi.json']);
const PUBLIC_PREFIXES = ['/docs'];

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

export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || /^127\.\d+\.\d+\.\d+$/.test(h) || /^::ffff:127\./.test(h);
}

/** The effective mode and the warning to log, or an error when the configuration is unsafe. */
export function resolveAuthMode(config: Config): { mode: 'off' | 'jwt'; warning?: string } {
  const keys = hasKeys(config);
  if (config.auth === 'jwt') {
    if (!keys) {
      throw new Error(
        'AUTH=jwt needs a key: set JWT_SECRET, JWT_PUBLIC_KEY (or JWT_PUBLIC_KEY_FILE) or JWKS_FILE',
      );
    }
    return { mode: 'jwt' };
  }
  if (config.auth === 'off') {
    return {
      mode: 'off',
      warning: `AUTH=off: access control is DISABLED — anyone who can reach ${config.host}:${config.port} can publish, read and administer everything${keys ? ' (the configured JWT keys are ignored)' : ''}`,
    };
  }
  if (keys) return { mode: 'jwt' };
  if (isLoopback(config.host)) {
    return {
      mode: 'off',
      warning: `no JWT key configured: access control is OFF (allowed only because HOST=${config.host} is loopback). Set JWT_SECRET (or JWT_PUBLIC_KEY / JWKS_FILE) to require tokens`,
    };
  }
  throw new Error(
    `HOST=${config.host} is reachable from other machines but no JWT key is configured: set JWT_SECRET, JWT_PUBLIC_KEY(_FILE) or JWKS_FILE to require tokens, or AUTH=off to run without access control`,
  );
}

const CHALLENGE = 'Bearer realm="commitfeed"';

function unauthorized(message: string, invalid: boolean): ApiError {
  return new ApiError(401, 'unauthorized', message, {
    'www-authenticate': invalid ? `${CHALLENGE}, error="invalid_token"` : CHALLENGE,
  });
}

function forbidden(message: string): ApiError {
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

export const AUTH_EXPIRED_FRAME = `event: auth-expired\ndata: ${JSON.stringify({
  code: 'auth_expired',
  message: 'the token expired: reconnect with a fresh token (Last-Event-ID resumes where this ended)',
})}\n\n`;

/** setTimeout's longest delay. */
const MAX_DELAY = 2 ** 31 - 1;

/**
 * Admits an SSE stream before it opens (429 `too_many_connections` over MAX_SSE_PER_TOKEN). Call the
 * returned function once the stream is open, with how to end it: it ends the stream with
 * `event: auth-expired` when the token expires, and frees the slot when the connection closes.
 */
export function admitSse(
  request: FastifyRequest,
  reply: FastifyReply,
  maxPerToken: number,
): (end: (frame: string) => void) => void {
  const p = request.principal;
  const counts = request.server.sseByToken;
  const id = p?.tokenId ?? '';
  if (id !== '') {
    const n = counts.get(id) ?? 0;
    if (n >= maxPerToken) {
      throw new ApiError(
        429,
        'too_many_connections',
        `this token already holds ${n} SSE connections (MAX_SSE_PER_TOKEN=${maxPerToken}); close one, or read several streams on one connection with /v1/events`,
        { 'retry-after': '5' },
      );
    }
    counts.set(id, n + 1);
  }
  let timer: NodeJS.Timeout | undefined;
  let closed = false;
  reply.raw.once('close', () => {
    closed = true;
    clearTimeout(timer);
    if (id === '') return;
    const n = (counts.get(id) ?? 1) - 1;
    if (n <= 0) counts.delete(id);
    else counts.set(id, n);
  });
  return (end) => {
    const expiresAt = p?.expiresAt;
    if (expiresAt === undefined || closed) return;
    const arm = () => {
      const left = expiresAt - Date.now();
      if (left <= 0) return end(AUTH_EXPIRED_FRAME);
      timer = setTimeout(arm, Math.min(left, MAX_DELAY));
    };
    arm();
  };
}

/** Reads the token from the request, and takes `access_token` out of the query. */
function takeToken(request: FastifyRequest): string | undefined {
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

function isPublic(request: FastifyRequest): boolean {
  const opts = request.routeOptions;
  if (opts.config?.access === 'public' || request.method === 'OPTIONS') return true;
  const url = opts.url;
  // No route: the 404 handler answers.
  if (url === undefined) return true;
  return PUBLIC_PATHS.has(url) || PUBLIC_PREFIXES.some((p) => url === p || url.startsWith(`${p}/`));
}

/** Verified tokens, so a busy client does not pay a signature check per request. */
class TokenCache {
  private readonly map = new Map<string, Principal>();
  constructor(
    private readonly verifier: Verifier,
    private readonly max = 10000,
  ) {}

  async get(token: string): Promise<Principal> {
    const hit = this.map.get(token);
    if (hit !== undefined) {
      if (hit.expiresAt === undefined || hit.expiresAt > Date.now()) return hit;
      this.map.delete(token);
      throw new TokenError('the token has expired');
    }
    const p = await this.verifier.verify(token);
    if (this.map.size >= this.max) this.map.clear();
    this.map.set(token, p);
    return p;
  }
}

function validateOrigins(origins: string[]): void {
  if (origins.includes('*')) {
    if (origins.length > 1) throw new Error('CORS_ORIGINS: "*" cannot be combined with other origins');
    return;
  }
  for (const o of origins) {
    let ok = false;
    try {
      ok = new URL(o).origin === o;
    } catch {
      // reported below
    }
    if (!ok) {
      throw new Error(
        `CORS_ORIGINS: ${JSON.stringify(o)} is not an origin (scheme://host[:port], no path or trailing slash)`,
      );
    }
  }
}

/**
 * Installs CORS and the token hook on the root instance. Call before any route is added.
 */
export async function registerAccess(app: FastifyInstance, config: Config): Promise<'off' | 'jwt'> {
  const { mode, warning } = resolveAuthMode(config);
  if (warning) app.log.warn(warning);

  if (config.corsOrigins.length > 0) {
    validateOrigins(config.corsOrigins);
    const any = config.corsOrigins[0] === '*';
    await app.register(cors, {
      // An array of exact origins: the request's origin is echoed when listed (with Vary: Origin).
      origin: any ? '*' : config.corsOrigins,
      // Cookies and Authorization from browsers only for listed origins, never with `*`.
      credentials: !any,
      methods: ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'],
      allowedHeaders: ['Authorization', 'Content-Type', 'Last-Event-ID', 'Accept', 'Cache-Control'],
      exposedHeaders: ['Retry-After', 'WWW-Authenticate'],
      maxAge: 600,
      strictPreflight: false,
    });
  }

  app.decorate('sseByToken', new Map<string, number>());
  app.decorateRequest('principal', undefined);

  if (mode === 'off') {
    app.addHook('onRequest', async (request) => {
      request.principal = OPEN;
      try {
        takeToken(request);
      } catch {
        // Auth is off: a malformed credential is ignored like a valid one.
      }
    });
    return mode;
  }

  const verifier = await createVerifier(config);
  app.log.info(
    { algorithms: verifier.algorithms },
    'access control on: every non-public route needs a token',
  );
  const cache = new TokenCache(verifier);
  app.addHook('onRequest', async (request) => {
    const open = isPublic(request);
    let token: string | undefined;
    try {
      token = takeToken(request);
    } catch (err) {
      if (open) return;
      throw err;
    }
    if (token === undefined) {
      if (open) return;
      throw unauthorized(
        `this request needs a token: Authorization: Bearer <jwt>, ?${TOKEN_QUERY}=<jwt> or the ${TOKEN_COOKIE} cookie`,
        false,
      );
    }
    try {
      request.principal = await cache.get(token);
    } catch (err) {
      if (open) return;
      if (err instanceof TokenError) throw unauthorized(err.message, true);
      throw err;
    }
    if (request.routeOptions.config?.access === 'admin') authorizeAdmin(request);
  });
  return mode;
}

/** Log serializer for requests: the URL without the `access_token` value. */
export function redactedRequest(req: { method: string; url: string; ip?: string; id?: string }) {
  return {
    method: req.method,
    url: req.url.includes(TOKEN_QUERY)
      ? req.url.replace(/([?&]access_token=)[^&#]*/gi, '$1[redacted]')
      : req.url,
    host: (req as { host?: string }).host,
    remoteAddress: req.ip,
  };
}
