/**
 * Who may publish to and subscribe on the Mercure hub (draft-08 §Authorization).
 *
 * The token comes from `Authorization: Bearer` when that header is present (the cookie is then
 * ignored), else from the MERCURE_COOKIE cookie; never from the query (the native `access_token`
 * parameter and `commitfeed_token` cookie mean nothing here). It is verified by issuers.ts (RFC 9068
 * at+jwt, issuer-bound keys, `aud` = MERCURE_RESOURCE) and its `authorization_details` are parsed as
 * §Authorization Details says: only entries of the Mercure type count, and one invalid Mercure entry
 * rejects the whole token (no partial grant). Grants are cached per token until `exp` (plus the
 * clock tolerance the native tokens use), so a busy subscriber costs one map lookup per request.
 *
 * Native tokens (`typ: JWT`, the `commitfeed` claim) never pass here, and Mercure tokens grant
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
import { DETAIL_TYPE, type Role, Issuers } from './issuers.ts';
import {
  MAX_PATTERN_LENGTH,
  MatcherError,
  type MatchType,
  type TopicMatcher,
  type TopicSelector,
  compileSelector,
} from './match.ts';

/** Limits on a token's Mercure details (draft: over a limit is `invalid_token`). */
export const MAX_DETAILS = 32;
export const MAX_DETAIL_TOPICS = 100;

export interface MercureGrants {
  publish: TopicSelector[];
  /** In token order: the payload of the first entry matching a Mercure subscription is its payload. */
  subscribe: { selector: TopicSelector; payload?: unknown }[];
  /** Seconds since the epoch (token expiry; the stream closes then). Infinity when access control
   * is off (AUTH=off, no MERCURE_ISSUERS): nothing expires, and no timer should be armed for it. */
  exp: number;
  iss: string;
}

export type MercureAuth = { ok: true; grants: MercureGrants | null } | MercureFailure;

const EVERYTHING: TopicSelector = { match: '*', matchType: 'exact' };

/** What the cache keeps per token. */
interface Cached {
  grants: MercureGrants;
  acceptedUntil: number;
}

class InvalidDetails extends TokenError {}

/** A token's Mercure grants from its `authorization_details`; throws InvalidDetails. */
export function parseGrants(
  payload: Record<string, unknown>,
  role: Role | undefined,
  hubUrl: string,
): Omit<MercureGrants, 'exp' | 'iss'> {
  const grants: Omit<MercureGrants, 'exp' | 'iss'> = { publish: [], subscribe: [] };
  const details = payload.authorization_details;
  if (details === undefined) return grants; // no Mercure detail: grants nothing
  if (!Array.isArray(details)) throw new InvalidDetails('authorization_details must be an array');
  let mercure = 0;
  for (const [i, d] of details.entries()) {
    if (typeof d !== 'object' || d === null || Array.isArray(d)) {
      throw new InvalidDetails(`authorization_details[${i}] must be an object`);
    }
    const detail = d as Record<string, unknown>;
    if (typeof detail.type !== 'string')
      throw new InvalidDetails(`authorization_details[${i}].type is missing`);
    if (detail.type !== DETAIL_TYPE) continue; // another API's detail: not ours to judge
    if (++mercure > MAX_DETAILS) throw new InvalidDetails(`more than ${MAX_DETAILS} Mercure details`);
    const { actions, topics, payload: extra } = detail;
    if (!Array.isArray(actions) || actions.length === 0 || !actions.every((a) => typeof a === 'string')) {
      throw new InvalidDetails(`authorization_details[${i}].actions must be a non-empty array of strings`);
    }
    if (!Array.isArray(topics) || topics.length === 0) {
      throw new InvalidDetails(`authorization_details[${i}].topics must be a non-empty array`);
    }
    if (topics.length > MAX_DETAIL_TOPICS) {
      throw new InvalidDetails(
        `authorization_details[${i}].topics has more than ${MAX_DETAIL_TOPICS} entries`,
      );
    }
    if (extra !== undefined && (typeof extra !== 'object' || extra === null || Array.isArray(extra))) {
      throw new InvalidDetails(`authorization_details[${i}].payload must be an object`);
    }
    const selectors = topics.map((t, j) => selectorOf(t, `authorization_details[${i}].topics[${j}]`, hubUrl));
    // Unknown actions grant nothing and are not an error; a key bound to one role grants only it.
    if (actions.includes('publish') && role !== 'subscribe') grants.publish.push(...selectors);
    if (actions.includes('subscribe') && role !== 'publish') {
      for (const selector of selectors) {
        grants.subscribe.push(extra === undefined ? { selector } : { selector, payload: extra });
      }
    }
  }
  return grants;
}

function selectorOf(raw: unknown, where: string, hubUrl: string): TopicSelector {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new InvalidDetails(`${where} must be an object {match, match_type?}`);
  }
  const { match, match_type: type = 'exact' } = raw as Record<string, unknown>;
  if (typeof match !== 'string') throw new InvalidDetails(`${where}.match must be a string`);
  if (match.length > MAX_PATTERN_LENGTH) {
    throw new InvalidDetails(`${where}.match is longer than ${MAX_PATTERN_LENGTH} characters`);
  }
  if (type !== 'exact' && type !== 'urlpattern') {
    throw new InvalidDetails(`${where}.match_type must be "exact" or "urlpattern"`);
  }
  const selector = { match, matchType: type as MatchType };
  try {
    compileSelector(selector, hubUrl); // an invalid or unsafe pattern rejects the token
  } catch (err) {
    if (err instanceof MatcherError) throw new InvalidDetails(`${where}: ${err.message}`);
    throw err;
  }
  return selector;
}

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
  private readonly cache: TokenCache<Cached>;
  /** AUTH=off (or no key on loopback) and no Mercure issuer: the closed-network hub of the draft. */
  private readonly open: boolean;
  private readonly hubUrl: string;

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
    this.cache = new TokenCache<Cached>({
      verify: async (token) => {
        const { payload, role } = await this.issuers.verify(token);
        const grants = parseGrants(payload, role, this.hubUrl);
        return {
          grants: { ...grants, exp: payload.exp, iss: payload.iss },
          acceptedUntil: (payload.exp + CLOCK_TOLERANCE_S) * 1000,
        };
      },
    });
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
      const entry = await this.cache.get(found.token);
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
   * selector matches the Mercure subscription's own matcher string taken as a topic.
   */
  payloadFor(grants: MercureGrants | null, match: string): unknown {
    if (grants === null) return undefined;
    const ms = compiled(grants, this.hubUrl).subscribe;
    const i = ms.findIndex((m) => m(match));
    return i < 0 ? undefined : grants.subscribe[i].payload;
  }

  /** The token and where it came from, or the 400 for a malformed presentation. */
  private takeToken(
    request: FastifyRequest,
  ): { token: string | undefined; from: 'header' | 'cookie' } | MercureFailure {
    const header = request.headers.authorization;
    if (header !== undefined) {
      // RFC 6750 §2.1: "Bearer" 1*SP b64token; the scheme is case-insensitive.
      const m = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i.exec(header);
      if (!m) return this.challenges.malformed('Authorization must be "Bearer <token>"');
      if (m[1].length > MAX_TOKEN_CHARS) return this.challenges.invalid();
      return { token: m[1], from: 'header' };
    }
    const raw = request.headers.cookie
      ? readCookie(request.headers.cookie, this.config.mercureCookie)
      : undefined;
    if (raw === undefined || raw === '') return { token: undefined, from: 'cookie' };
    if (raw.length > MAX_TOKEN_CHARS) return this.challenges.invalid();
    return { token: raw, from: 'cookie' };
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
