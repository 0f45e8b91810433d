/**
 * Access control for every route: CORS, the token of each request, and the checks routes call. This
 * file registers it all; each job has its own file in src/auth/:
 *
 * - mode.ts — the mode (`AUTH`): `jwt` when any key is configured (deny by default: every route needs
 *   a valid token unless it is public); `off` only when asked for, or when no key is configured and
 *   HOST is a loopback address (a loud warning at start-up either way). A non-loopback HOST without
 *   keys and without `AUTH=off` refuses to start.
 * - token-source.ts — where the token comes from, first found wins: `Authorization: Bearer <jwt>`,
 *   the `access_token` query parameter (EventSource cannot set headers), the `commitfeed_token`
 *   cookie. `access_token` is removed from the query before validation, so every route accepts it
 *   and no route sees it.
 * - verifier.ts verifies it with the keys of keys.ts (pinned algorithms), reads the `commitfeed`
 *   claim into what it grants (tokens.ts, CLOCK_TOLERANCE_S) and names it by its content, not its
 *   encoding (tokenIdentity); token-cache.ts keeps verified tokens, keyed by signature bytes, until
 *   `exp` + the tolerance.
 * - The onRequest hook here (before the body is read): a protected route without a valid token is a
 *   401; a route with `config: { access: 'admin' }` also needs `admin: true` (403).
 * - policy.ts — public routes (`config: { access: 'public' }`, CORS preflights, 404s, and the paths
 *   in PUBLIC_PATHS: health, the live page and the API docs, whose routes other modules own), and
 *   `authorize(request, action, names)`, which routes call for the streams or queues they touch (403).
 * - sse-admission.ts — `admitSse` enforces the per-token connection limit (429) before a stream
 *   opens, ends the stream with `event: auth-expired` when the token expires, and frees the slot on
 *   close.
 * - cors.ts — CORS_ORIGINS; redact.ts — `access_token` (and the Mercure hub's 0.x `authorization`)
 *   values kept out of request logs (through redactUrl in token-source.ts, whatever the spelling of
 *   the parameter name).
 */
import type { FastifyInstance } from 'fastify';
import type { Config } from '../config/config.ts';
import { registerCors } from './cors.ts';
import { resolveAuthMode } from './mode.ts';
import { authorizeAdmin, isPublic, unauthorized } from './policy.ts';
import { OPEN, type Principal, TokenError } from './tokens.ts';
import { createVerifier } from './verifier.ts';
import { TokenCache } from './token-cache.ts';
import { TOKEN_COOKIE, TOKEN_QUERY, takeToken } from './token-source.ts';

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

/**
 * Installs CORS and the token hook on the root instance. Call before any route is added.
 */
export async function registerAccess(app: FastifyInstance, config: Config): Promise<'off' | 'jwt'> {
  const { mode, warning } = resolveAuthMode(config);
  if (warning) app.log.warn(warning);

  await registerCors(app, config.corsOrigins);

  app.decorate('sseByToken', new Map<string, number>());
  app.decorateRequest('principal', undefined);

  if (mode === 'off') {
    // A callback hook, not an async one: it runs on every request (no promise, no microtask turn).
    app.addHook('onRequest', (request, _reply, done) => {
      request.principal = OPEN;
      try {
        takeToken(request);
      } catch {
        // Auth is off: a malformed credential is ignored like a valid one.
      }
      done();
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
