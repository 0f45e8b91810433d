/**
 * Bearer tokens: signed JWTs (jose) whose `commitfeed` claim lists what the bearer may do, as name
 * patterns:
 *
 * ```json
 * { "sub": "billing-ui", "exp": 1767225600,
 *   "commitfeed": { "publish": ["orders.*"], "subscribe": ["*"], "enqueue": ["emails"],
 *                   "work": ["emails"], "admin": false } }
 * ```
 *
 * A pattern is an exact name or a glob where `*` matches any run of characters (`orders.*` matches
 * `orders.eu` and `orders.eu.paid`, not `orders`; `*` matches every name). A missing list grants
 * nothing; `admin: true` grants queue administration and /metrics (when it requires admin) only.
 *
 * This file says what a token grants (the claim, read into a Principal) and mints one; keys.ts
 * holds the keys that verify signatures, verifier.ts the native verifier built on them.
 */
import { type JWTPayload, SignJWT } from 'jose';

export const CLAIM = 'commitfeed';
/**
 * Seconds of clock skew allowed on `exp` and `nbf` between token issuers and this server. One rule
 * everywhere: a token is accepted until `exp` + this, on first use (verification), on later use (the
 * token cache) and by open SSE streams, which end then.
 */
export const CLOCK_TOLERANCE_S = 5;
export type Action = 'publish' | 'subscribe' | 'enqueue' | 'work';
export const ACTIONS: readonly Action[] = ['publish', 'subscribe', 'enqueue', 'work'];

/** What a request may do. */
export interface Principal {
  /** The token's `sub`, for logs; undefined when auth is off. */
  subject: string | undefined;
  /** Identifies the token by what it says, not how it is encoded (for per-token connection limits);
   * '' when auth is off. See tokenIdentity. */
  tokenId: string;
  /** When the token stops being accepted, in ms since the epoch: `exp` + CLOCK_TOLERANCE_S (the
   * same instant verification uses); undefined for a token without `exp`. */
  acceptedUntil: number | undefined;
  can(action: Action, name: string): boolean;
  admin: boolean;
}

/** Everything allowed: auth is off. */
export const OPEN: Principal = Object.freeze({
  subject: undefined,
  tokenId: '',
  acceptedUntil: undefined,
  can: () => true,
  admin: true,
});

/** Patterns may only use name characters and `*`. */
const PATTERN_RE = /^[A-Za-z0-9._:*-]{1,200}$/;

/** Compiles name patterns into one predicate. */
export function matcher(patterns: readonly string[]): (name: string) => boolean {
  if (patterns.includes('*')) return () => true;
  const exact = new Set(patterns.filter((p) => !p.includes('*')));
  const globs = patterns.filter((p) => p.includes('*'));
  if (globs.length === 0) return (name) => exact.has(name);
  const re = new RegExp(
    `^(?:${globs.map((g) => g.replace(/[.]/g, '\\.').replace(/\*+/g, '.*')).join('|')})$`,
  );
  return (name) => exact.has(name) || re.test(name);
}

export class TokenError extends Error {}

/** Checks the claim's shape and builds the principal. */
export function principalFromClaims(payload: JWTPayload, tokenId: string): Principal {
  const raw = payload[CLAIM];
  const claim = (raw ?? {}) as Record<string, unknown>;
  if (typeof claim !== 'object' || claim === null || Array.isArray(claim)) {
    throw new TokenError(`the "${CLAIM}" claim must be an object`);
  }
  const checks = new Map<Action, (name: string) => boolean>();
  for (const action of ACTIONS) {
    const list = claim[action] ?? [];
    if (!Array.isArray(list) || !list.every((p) => typeof p === 'string' && PATTERN_RE.test(p))) {
      throw new TokenError(
        `"${CLAIM}.${action}" must be a list of name patterns (letters, digits, . _ : - and *)`,
      );
    }
    checks.set(action, matcher(list as string[]));
  }
  if (claim.admin !== undefined && typeof claim.admin !== 'boolean') {
    throw new TokenError(`"${CLAIM}.admin" must be true or false`);
  }
  return {
    subject: typeof payload.sub === 'string' ? payload.sub : undefined,
    tokenId,
    acceptedUntil: typeof payload.exp === 'number' ? (payload.exp + CLOCK_TOLERANCE_S) * 1000 : undefined,
    can: (action, name) => checks.get(action)!(name),
    admin: claim.admin === true,
  };
}

export interface MintOptions {
  secret: string;
  subject?: string;
  /** e.g. '1h', '15m', '30d'; or seconds. */
  ttl?: string | number;
  scopes: Partial<Record<Action, string[]>> & { admin?: boolean };
  issuer?: string;
  audience?: string;
}

/** Mints an HS256 token (the dev script and tests). */
export async function mintToken(o: MintOptions): Promise<string> {
  const jwt = new SignJWT({ [CLAIM]: o.scopes })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setIssuedAt();
  if (o.subject) jwt.setSubject(o.subject);
  if (o.issuer) jwt.setIssuer(o.issuer);
  if (o.audience) jwt.setAudience(o.audience);
  if (o.ttl !== undefined) {
    jwt.setExpirationTime(typeof o.ttl === 'number' ? Math.floor(Date.now() / 1000) + o.ttl : o.ttl);
  }
  return jwt.sign(new TextEncoder().encode(o.secret));
}
