/**
 * Mercure hub test plumbing: the settings a hub test starts its server with, and RFC 9068 access
 * tokens minted with jose (HS256 by default), with every field overridable so tests can forge
 * exactly the defect they check.
 */
import { randomUUID } from 'node:crypto';
import { type JWTPayload, SignJWT } from 'jose';
import type { Config } from '../src/config/config.ts';
import type { TopicSelector } from '../src/mercure/match.ts';

export const MERCURE_SECRET = 'mercure-test-secret-0123456789-0123456789';
export const MERCURE_ISSUER = 'https://app.example.com';
export const MERCURE_RESOURCE = 'https://hub.example.com/.well-known/mercure';
export const DETAIL_TYPE = 'https://mercure.rocks/authorization-detail';

/** Settings for startTestServer: one HS256 issuer, the resource, anonymous subscribers refused. */
export function mercureConfigEnv(overrides: Partial<Config> = {}): Partial<Config> {
  return {
    mercureIssuers: [{ iss: MERCURE_ISSUER, secret: MERCURE_SECRET }],
    mercureResource: MERCURE_RESOURCE,
    mercureAnonymous: false,
    ...overrides,
  };
}

/** A selector as a test writes it: a string is an exact match (`*` is everything). */
export type Grant = string | TopicSelector | { match: string; match_type?: string };

export interface MercureTokenOptions {
  publish?: Grant[];
  subscribe?: Grant[];
  /** The payload of the subscribe detail. */
  payload?: Record<string, unknown>;
  /** Replaces the generated authorization_details entirely (for malformed ones). */
  details?: unknown;
  /** Seconds since the epoch; null: no exp claim. Default: one hour from now. */
  exp?: number | null;
  nbf?: number;
  iss?: string;
  aud?: string | string[];
  typ?: string | null;
  /** HS256 secret (default MERCURE_SECRET). */
  secret?: string;
  /** Extra protected-header members (e.g. an embedded `jwk`). */
  header?: Record<string, unknown>;
  /** Extra claims. */
  claims?: Record<string, unknown>;
}

function topicOf(g: Grant): Record<string, unknown> {
  if (typeof g === 'string') return { match: g };
  if ('matchType' in g) return { match: g.match, match_type: g.matchType };
  return g;
}

/** An RFC 9068 at+jwt access token for the hub (HS256). */
export async function mercureToken(o: MercureTokenOptions = {}): Promise<string> {
  const details: unknown[] = [];
  if (o.publish) details.push({ type: DETAIL_TYPE, actions: ['publish'], topics: o.publish.map(topicOf) });
  if (o.subscribe) {
    details.push({
      type: DETAIL_TYPE,
      actions: ['subscribe'],
      topics: o.subscribe.map(topicOf),
      ...(o.payload ? { payload: o.payload } : {}),
    });
  }
  const now = Math.floor(Date.now() / 1000);
  const claims: JWTPayload = {
    iss: o.iss ?? MERCURE_ISSUER,
    aud: o.aud ?? MERCURE_RESOURCE,
    sub: 'urn:uuid:00000000-0000-4000-8000-000000000001',
    client_id: MERCURE_ISSUER,
    iat: now,
    jti: `urn:uuid:${randomUUID()}`,
    authorization_details: o.details ?? details,
    ...o.claims,
  };
  if (o.exp !== null) claims.exp = o.exp ?? now + 3600;
  if (o.nbf !== undefined) claims.nbf = o.nbf;
  const header: Record<string, unknown> = { alg: 'HS256', ...o.header };
  if (o.typ !== null) header.typ = o.typ ?? 'at+jwt';
  return new SignJWT(claims)
    .setProtectedHeader(header as { alg: string })
    .sign(new TextEncoder().encode(o.secret ?? MERCURE_SECRET));
}

/** The 0.x hub's (and Symfony's) default secret: 34 bytes, so it passes the 32-byte rule. */
export const LEGACY_SECRET = '!ChangeThisMercureHubJWTSecretKey!';

/** Settings of a hub in compatibility mode with the 0.x default key for both roles, beside the issuer. */
export function legacyConfigEnv(overrides: Partial<Config> = {}): Partial<Config> {
  return mercureConfigEnv({
    mercureProtocolCompatibility: 8,
    mercurePublisherJwtKey: LEGACY_SECRET,
    mercureSubscriberJwtKey: LEGACY_SECRET,
    ...overrides,
  });
}

/**
 * A 0.x token as 0.x publishers mint it: `{"typ":"JWT","alg":"HS256"}` and the given claims only (no
 * `iss`, `aud` or `exp` unless given), e.g. `{ mercure: { publish: ['*'] } }`.
 */
export function legacyToken(
  claims: Record<string, unknown>,
  o: { secret?: string; header?: Record<string, unknown> } = {},
): Promise<string> {
  return new SignJWT(claims as JWTPayload)
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT', ...o.header } as { alg: string })
    .sign(new TextEncoder().encode(o.secret ?? LEGACY_SECRET));
}

/** An anonymous form publish to the hub at `base` (access control off): the update's id, or throws. */
export async function publishForm(base: string, pairs: [string, string][]): Promise<string> {
  const res = await fetch(`${base}/.well-known/mercure`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams(pairs).toString(),
  });
  if (res.status !== 200) throw new Error(`publish: ${res.status} ${await res.text()}`);
  return res.text();
}
