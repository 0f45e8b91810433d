/**
 * Who may publish to and subscribe on the Mercure hub (draft-08 §Authorization).
 *
 * The token comes from `Authorization: Bearer` when that header is present (the cookie is then
 * ignored), else from the MERCURE_COOKIE cookie; never from the query (the native `access_token`
 * parameter and `commitfeed_token` cookie mean nothing here). It is verified by issuers.ts (RFC 9068
 * at+jwt, issuer-bound keys, `aud` = MERCURE_RESOURCE) and read into grants by grants.ts. Grants are
 * cached per token until `exp` (plus the clock tolerance the native tokens use), so a busy subscriber
 * costs one map lookup per request.
 *
 * With MERCURE_PROTOCOL_COMPATIBILITY=8 the hub also takes what 0.x clients send (guide §Compatibility
 * mode): the `authorization` query parameter (after the header, before the cookies) and the
 * `mercureAuthorization` cookie (when MERCURE_COOKIE is absent), and a token whose `iss` names no
 * MERCURE_ISSUERS entry is tried with the 0.x key of the request's role (legacy-issuer.ts), so grants
 * are cached per role then. A warning says so at start. Without the setting none of it runs.
 *
 * Native tokens (`typ: JWT`, the `commitfeed` claim) grant nothing here, and Mercure tokens grant
 * nothing on native routes (they carry no `commitfeed` claim).
 *
 * Lifecycle: one per app, built at start from configuration (a bad key stops start-up); the cache is
 * in memory and bounded (see TokenCache). Nothing here touches the database.
 */
import type { FastifyBaseLogger, FastifyRequest } from 'fastify';
import { resolveAuthMode } from '../auth/mode.ts';
import { TokenCache } from '../auth/token-cache.ts';
import { CLOCK_TOLERANCE_S, TokenError } from '../auth/tokens.ts';
import { MAX_TOKEN_CHARS, readCookie } from '../auth/token-source.ts';
import type { Config } from '../config/config.ts';
import { Challenges, type MercureFailure } from './challenge.ts';
import { type MercureGrants, grantsOf } from './grants.ts';
import { type Role, Issuers } from './issuers.ts';
import { type TopicMatcher, type TopicSelector, compileSelector } from './match.ts';

export type MercureAuth = { ok: true; grants: MercureGrants | null } | MercureFailure;

const EVERYTHING: TopicSelector = { match: '*', matchType: 'exact' };

/** The 0.x cookie, read in compatibility mode when MERCURE_COOKIE is absent. */
export const LEGACY_COOKIE = 'mercureAuthorization';
/** The 0.x query parameter carrying the token (compatibility mode; redacted from logs always). */
export const LEGACY_TOKEN_PARAM = 'authorization';

/** What the cache keeps per token. */
interface Cached {
  grants: MercureGrants;
  /** undefined: never by time (a 0.x token without `exp`). */
  acceptedUntil: number | undefined;
}

type Found = { token: string | undefined; from: 'header' | 'query' | 'cookie' };

/** Grants compiled once per grants object (they live as long as their cache entry). */
interface Compiled {
  publish: TopicMatcher[];
  subscribe: TopicMatcher[];
}
const compiledCache = new WeakMap<MercureGrants, Compiled>();

function compiled(grants: MercureGrants, hubUrl: string): Compiled {
  let c = compiledCache.get(grants);
  if (c === undefined) {
    c = {
      publish: grants.publish.map((s) => compileSelector(s, hubUrl)),
      subscribe: grants.subscribe.map((s) => compileSelector(s.selector, hubUrl)),
    };
    compiledCache.set(grants, c);
  }
  return c;
}

export class MercureAuthorizer {
  readonly challenges: Challenges;
  private readonly issuers: Issuers;
  /** One cache for both actions, except in compatibility mode: a 0.x token's key depends on the role. */
  private readonly caches: Record<Role, TokenCache<Cached>>;
  /** AUTH=off (or no key on loopback) and no Mercure issuer: the closed-network hub of the draft. */
  private readonly open: boolean;
  private readonly hubUrl: string;
  /** MERCURE_PROTOCOL_COMPATIBILITY=8: 0.x clients are accepted too. */
  private readonly legacy: boolean;

  constructor(
    private readonly config: Config,
    private readonly log: FastifyBaseLogger,
  ) {
    this.issuers = Issuers.fromConfig(config);
    this.challenges = new Challenges(config.mercureResource);
    this.hubUrl = config.mercureResource ?? `http://${config.host}:${config.port}/.well-known/mercure`;
    this.open = !this.issuers.configured && resolveAuthMode(config).mode === 'off';
    if (this.open) {
      log.warn('Mercure hub: no MERCURE_ISSUERS and access control off: anyone who can reach it may publish');
    }
    this.legacy = config.mercureProtocolCompatibility === 8;
    if (this.legacy) {
      log.warn(
        'Mercure hub: MERCURE_PROTOCOL_COMPATIBILITY=8 accepts Mercure 0.x clients, which weakens token validation: tokens of the 0.x keys need no `typ: at+jwt`, `aud`, `iss` or `exp`, and may come in the URL (`authorization`). Unset it once every client speaks 1.0',
      );
    }
    const cacheFor = (role: Role | undefined) =>
      new TokenCache<Cached>({ verify: (token) => this.verify(token, role) });
    const shared = this.legacy ? undefined : cacheFor(undefined);
    this.caches = {
      publish: shared ?? cacheFor('publish'),
      subscribe: shared ?? cacheFor('subscribe'),
    };
  }

  /** Verifies a token (for `role`'s request, in compatibility mode) and reads its grants. */
  private async verify(token: string, role: Role | undefined): Promise<Cached> {
    const v = await this.issuers.verify(token, role);
    const grants = grantsOf(v.payload, v.role, this.hubUrl, v.legacy);
    const exp = typeof v.payload.exp === 'number' ? v.payload.exp : Number.POSITIVE_INFINITY;
    return {
      grants: { ...grants, exp, iss: v.payload.iss ?? '' },
      acceptedUntil: Number.isFinite(exp) ? (exp + CLOCK_TOLERANCE_S) * 1000 : undefined,
    };
  }

  /** The hub's URL as topics and patterns are resolved against it. */
  get hub(): string {
    return this.hubUrl;
  }

  /**
   * The request's grants, or the answer to send. `publish` needs a token (bare 401 without one);
   * `subscribe` without a token is anonymous (grants null) when MERCURE_ANONYMOUS is on. A token
   * presented by cookie on a publish must come from an allowed origin (CSRF).
   */
  async authenticate(request: FastifyRequest, action: 'publish' | 'subscribe'): Promise<MercureAuth> {
    if (this.open) return { ok: true, grants: OPEN_GRANTS };
    const found = this.takeToken(request);
    if ('ok' in found) return found;
    if (found.token === undefined) {
      if (action === 'subscribe' && this.config.mercureAnonymous) return { ok: true, grants: null };
      return this.challenges.missing(
        `this needs an access token: Authorization: Bearer <token>, or the ${this.config.mercureCookie} cookie`,
      );
    }
    if (action === 'publish' && found.from === 'cookie') {
      const refused = this.crossSite(request);
      if (refused) return refused;
    }
    try {
      const entry = await this.caches[action].get(found.token);
      return { ok: true, grants: entry.grants };
    } catch (err) {
      if (!(err instanceof TokenError)) throw err;
      this.log.debug({ reason: err.message }, 'Mercure token refused');
      return this.challenges.invalid();
    }
  }

  /** The 403 insufficient_scope answer (after the caller checked topics against the grants). */
  forbidden(message?: string): MercureAuth {
    return this.challenges.forbidden(message);
  }

  /** May these grants publish an update with these topics (every one of them)? */
  canPublish(grants: MercureGrants, topics: readonly string[]): boolean {
    const ms = compiled(grants, this.hubUrl).publish;
    return topics.every((t) => ms.some((m) => m(t)));
  }

  /** May these grants read a private update with these topics (any one of them)? */
  canRead(grants: MercureGrants | null, topics: readonly string[]): boolean {
    if (grants === null) return false;
    const ms = compiled(grants, this.hubUrl).subscribe;
    return topics.some((t) => ms.some((m) => m(t)));
  }

  /**
   * The payload of a Mercure subscription (draft §Payloads): that of the first subscribe entry whose
   * selector matches the Mercure subscription's own matcher string taken as a topic; for a 0.x token,
   * its `mercure.payload` when that entry has none, or none matches.
   */
  payloadFor(grants: MercureGrants | null, match: string): unknown {
    if (grants === null) return undefined;
    const ms = compiled(grants, this.hubUrl).subscribe;
    const i = ms.findIndex((m) => m(match));
    return (i < 0 ? undefined : grants.subscribe[i].payload) ?? grants.fallbackPayload;
  }

  /**
   * The token and where it came from, or the 400 for a malformed presentation. In compatibility mode
   * the 0.x places come after each 1.0 one, in the 0.x order: the header, the `authorization` query
   * parameter (one value), the cookie, the 0.x cookie.
   */
  private takeToken(request: FastifyRequest): Found | MercureFailure {
    const header = request.headers.authorization;
    if (header !== undefined) {
      // RFC 6750 §2.1: "Bearer" 1*SP b64token; the scheme is case-insensitive.
      const m = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i.exec(header);
      if (!m) return this.challenges.malformed('Authorization must be "Bearer <token>"');
      if (m[1].length > MAX_TOKEN_CHARS) return this.challenges.invalid();
      return { token: m[1], from: 'header' };
    }
    const query = this.legacy ? (request.query as Record<string, unknown> | undefined) : undefined;
    const inUrl = query?.[LEGACY_TOKEN_PARAM];
    const cookies = request.headers.cookie;
    let from: Found['from'] = 'query';
    let raw = typeof inUrl === 'string' && inUrl !== '' ? inUrl : undefined;
    if (raw === undefined && cookies) {
      from = 'cookie';
      raw = readCookie(cookies, this.config.mercureCookie);
      if ((raw === undefined || raw === '') && this.legacy) raw = readCookie(cookies, LEGACY_COOKIE);
    }
    if (raw === undefined || raw === '') return { token: undefined, from: 'cookie' };
    if (raw.length > MAX_TOKEN_CHARS) return this.challenges.invalid();
    return { token: raw, from };
  }

  /**
   * CSRF (draft §Security Considerations): a cookie travels with any cross-site form post, so a
   * publish authenticated by it must come from a page of an allowed origin, told by `Origin`, else
   * `Referer`; a request with neither is refused.
   */
  private crossSite(request: FastifyRequest): MercureFailure | undefined {
    const allowed = this.config.mercurePublishOrigins;
    const origin = request.headers.origin;
    let source: string | undefined;
    if (typeof origin === 'string' && origin !== 'null') source = origin;
    else if (typeof request.headers.referer === 'string') {
      try {
        source = new URL(request.headers.referer).origin;
      } catch {
        source = undefined;
      }
    }
    if (source !== undefined && allowed.includes(source)) return undefined;
    return {
      ...this.challenges.forbidden(
        source === undefined
          ? 'a publish with the cookie needs an Origin or Referer header'
          : `publishing with the cookie is not allowed from ${JSON.stringify(source.slice(0, 200))} (MERCURE_PUBLISH_ORIGINS)`,
      ),
      code: 'cross_site_publish',
    };
  }
}

/** Everything, for a hub without access control. */
const OPEN_GRANTS: MercureGrants = Object.freeze({
  publish: [EVERYTHING],
  subscribe: [{ selector: EVERYTHING }],
  exp: Number.POSITIVE_INFINITY,
  iss: '',
}) as MercureGrants;
