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
 * Keys come from configuration, and each key type pins its algorithms: `JWT_SECRET` verifies HS256
 * only, a PEM public key verifies RS256 (RSA), ES256/ES384 (P-256/P-384) or EdDSA (Ed25519), a JWKS
 * file verifies by `kid` with the algorithm of each key. `alg: none`, and an algorithm no configured
 * key is pinned to (e.g. HS256 signed with a public key as the secret), are rejected before any
 * signature check.
 */
import { createPublicKey, hash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import {
  type JSONWebKeySet,
  type JWTPayload,
  type JWTVerifyGetKey,
  type JWTVerifyOptions,
  SignJWT,
  createLocalJWKSet,
  decodeProtectedHeader,
  errors,
  jwtVerify,
} from 'jose';

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

export interface KeyConfig {
  jwtSecret?: string;
  /** PEM (SPKI) public key text. */
  jwtPublicKey?: string;
  /** Path of a JSON Web Key Set with public keys. */
  jwksFile?: string;
  jwtIssuer?: string;
  jwtAudience?: string;
}

export function hasKeys(k: KeyConfig): boolean {
  return Boolean(k.jwtSecret || k.jwtPublicKey || k.jwksFile);
}

/** Where one set of trusted keys comes from (any of the three), and the names errors call them by. */
export interface KeySource {
  /** HS256 secret, at least 32 bytes. */
  secret?: string;
  /** PEM (SPKI) public key text. */
  publicKey?: string;
  /** Path of a JSON Web Key Set with public keys. */
  jwksFile?: string;
  /** How start-up errors name each source (a setting, or a setting and an entry of it). */
  names?: { secret: string; publicKey: string; jwksFile: string };
}

const NATIVE_NAMES = { secret: 'JWT_SECRET', publicKey: 'JWT_PUBLIC_KEY', jwksFile: 'JWKS_FILE' };

type KeyFor = { algs: readonly string[]; key: Parameters<typeof jwtVerify>[1] };

/** The algorithm an asymmetric public key is pinned to. */
function algForPem(pem: string, name: string): string {
  const key = createPublicKey(pem);
  switch (key.asymmetricKeyType) {
    case 'rsa':
      return 'RS256';
    case 'ec': {
      const curve = key.asymmetricKeyDetails?.namedCurve;
      if (curve === 'prime256v1') return 'ES256';
      if (curve === 'secp384r1') return 'ES384';
      throw new Error(`${name}: unsupported EC curve ${curve} (use P-256 or P-384)`);
    }
    case 'ed25519':
      return 'EdDSA';
    default:
      throw new Error(
        `${name}: unsupported key type ${key.asymmetricKeyType} (use RSA, EC P-256/P-384 or Ed25519)`,
      );
  }
}

/** The algorithm each JWK of a set is pinned to: its own `alg`, else the one its type implies. */
function algForJwk(jwk: Record<string, unknown>, where: string): string {
  if (jwk.kty === 'oct' || 'd' in jwk) {
    throw new Error(`${where}: only public keys belong here (use a secret for HS256)`);
  }
  const implied =
    jwk.kty === 'RSA'
      ? 'RS256'
      : jwk.kty === 'EC' && jwk.crv === 'P-256'
        ? 'ES256'
        : jwk.kty === 'EC' && jwk.crv === 'P-384'
          ? 'ES384'
          : jwk.kty === 'OKP' && jwk.crv === 'Ed25519'
            ? 'EdDSA'
            : undefined;
  if (!implied) throw new Error(`${where}: unsupported key ${JSON.stringify(jwk.kty)}/${jwk.crv}`);
  if (
    jwk.alg !== undefined &&
    jwk.alg !== implied &&
    !(implied === 'RS256' && /^(RS|PS)(256|384|512)$/.test(String(jwk.alg)))
  ) {
    throw new Error(`${where}: key alg ${jwk.alg} does not fit its type ${jwk.kty}`);
  }
  return typeof jwk.alg === 'string' ? jwk.alg : implied;
}

/** Claim checks besides the signature (jose's own options; `algorithms` is always set here). */
export type VerifyChecks = Omit<JWTVerifyOptions, 'algorithms'>;

/**
 * Trusted keys, each pinned to its algorithms. Only keys from configuration are ever used (a token's
 * `jwk`, `jku` or `x5u` header is never read), and the token's `alg` only chooses among them.
 */
export interface KeySet {
  /** Every algorithm some key of the set accepts. */
  algorithms: readonly string[];
  /** The verified payload; throws TokenError with a reason. */
  verify(token: string, checks: VerifyChecks): Promise<JWTPayload>;
}

/** Loads a key set from configuration; throws with a readable message on a bad key. */
export function loadKeySet(src: KeySource): KeySet {
  const names = src.names ?? NATIVE_NAMES;
  const keys: KeyFor[] = [];
  if (src.secret) {
    if (Buffer.byteLength(src.secret) < 32) {
      throw new Error(`${names.secret} must be at least 32 bytes (e.g. \`openssl rand -base64 32\`)`);
    }
    keys.push({ algs: ['HS256'], key: new TextEncoder().encode(src.secret) });
  }
  if (src.publicKey) {
    const alg = algForPem(src.publicKey, names.publicKey);
    keys.push({ algs: [alg], key: createPublicKey(src.publicKey) });
  }
  let jwks: { algs: string[]; get: JWTVerifyGetKey } | undefined;
  if (src.jwksFile) {
    const where = `${names.jwksFile} ${src.jwksFile}`;
    const set = JSON.parse(readFileSync(src.jwksFile, 'utf8')) as JSONWebKeySet;
    if (!Array.isArray(set.keys) || set.keys.length === 0) {
      throw new Error(`${where}: expected {"keys":[...]} with at least one key`);
    }
    const algs = [...new Set(set.keys.map((j) => algForJwk(j as unknown as Record<string, unknown>, where)))];
    jwks = { algs, get: createLocalJWKSet(set) };
  }
  const algorithms = [...new Set([...keys.flatMap((x) => x.algs), ...(jwks?.algs ?? [])])];

  return {
    algorithms,
    async verify(token, checks) {
      let alg: unknown;
      try {
        alg = decodeProtectedHeader(token).alg;
      } catch {
        throw new TokenError('the token is not a signed JWT');
      }
      if (typeof alg !== 'string' || !algorithms.includes(alg)) {
        throw new TokenError(
          `token algorithm ${JSON.stringify(alg)} is not accepted (accepted: ${algorithms.join(', ')})`,
        );
      }
      const candidates = keys.filter((x) => x.algs.includes(alg as string));
      let last: unknown;
      try {
        for (const c of candidates) {
          try {
            return (await jwtVerify(token, c.key, { ...checks, algorithms: c.algs as string[] })).payload;
          } catch (err) {
            if (!(err instanceof errors.JWSSignatureVerificationFailed)) throw err;
            last = err;
          }
        }
        if (jwks?.algs.includes(alg)) {
          return (await jwtVerify(token, jwks.get, { ...checks, algorithms: jwks.algs })).payload;
        }
        throw last;
      } catch (err) {
        throw new TokenError(reason(err));
      }
    },
  };
}

/** Is the token typed `at+jwt` (RFC 9068; `application/` prefix optional, any case)? */
function isAccessTokenJwt(token: string): boolean {
  try {
    const typ = decodeProtectedHeader(token).typ;
    return typeof typ === 'string' && typ.toLowerCase().replace(/^application\//, '') === 'at+jwt';
  } catch {
    return false;
  }
}

export interface Verifier {
  /** Verifies a compact JWT and returns its principal; throws TokenError with a reason. */
  verify(token: string): Promise<Principal>;
  /** Every algorithm some configured key accepts (for the start-up log). */
  algorithms: readonly string[];
}

/** Builds the native verifier from configuration; throws with a readable message on a bad key. */
export async function createVerifier(k: KeyConfig): Promise<Verifier> {
  const set = loadKeySet({ secret: k.jwtSecret, publicKey: k.jwtPublicKey, jwksFile: k.jwksFile });
  const checks: VerifyChecks = {
    issuer: k.jwtIssuer || undefined,
    audience: k.jwtAudience || undefined,
    // jose refuses once floor(now / 1000) - tolerance >= exp, i.e. from (exp + tolerance) * 1000 ms:
    // acceptedUntil is that instant.
    clockTolerance: CLOCK_TOLERANCE_S,
  };
  return {
    algorithms: set.algorithms,
    async verify(token) {
      if (isAccessTokenJwt(token)) {
        // The Mercure hub's tokens (RFC 9068) are not the API's, whatever key signed them.
        throw new TokenError('an at+jwt access token (for the Mercure hub) is not accepted here');
      }
      const payload = await set.verify(token, checks);
      return principalFromClaims(payload, tokenIdentity(token, payload));
    },
  };
}

const sha256 = (text: string): string => hash('sha256', text, 'base64url');

/**
 * The identity of a verified token, for per-token limits: its `jti` (scoped by issuer) when it has
 * one, else a hash of its signed content (header and payload as signed). The signature is left out
 * on purpose: base64url leaves unused low bits in the last character (an HS256 signature has four
 * spellings), and ECDSA signatures are malleable ((r, s) and (r, n - s) both verify), so the same
 * token can be presented with different signature text or even different signature bytes.
 */
export function tokenIdentity(token: string, payload: JWTPayload): string {
  if (typeof payload.jti === 'string' && payload.jti !== '') {
    return `jti:${sha256(`${payload.iss ?? ''}\n${payload.jti}`)}`;
  }
  return `jws:${sha256(token.slice(0, token.lastIndexOf('.')))}`;
}

const B64URL_RE = /^[A-Za-z0-9_-]*$/;

/**
 * A cache key for a token before it is verified: the signed content as sent (any change to it breaks
 * the signature) and the signature's decoded bytes, so the spellings of one signature share an
 * entry. A token that is not three base64url parts gets no key (it is verified, and refused, every
 * time). Hashed: entries cost the same whatever the token's size.
 */
export function tokenCacheKey(token: string): string | undefined {
  const dot = token.lastIndexOf('.');
  const signature = token.slice(dot + 1);
  if (dot < 0 || !B64URL_RE.test(signature)) return undefined;
  // The decoded signature as latin1 text: one character per byte, so distinct bytes stay distinct.
  return hash(
    'sha256',
    token.slice(0, dot + 1) + Buffer.from(signature, 'base64url').toString('latin1'),
    'base64url',
  );
}

function reason(err: unknown): string {
  if (err instanceof TokenError) return err.message;
  if (err instanceof errors.JWTExpired) return 'the token has expired';
  if (err instanceof errors.JWTClaimValidationFailed)
    return `the token's "${err.claim}" claim is not accepted (${err.reason})`;
  if (err instanceof errors.JWSSignatureVerificationFailed) return 'the token signature does not verify';
  if (err instanceof errors.JWKSNoMatchingKey) return 'no configured key matches the token';
  if (err instanceof errors.JOSEError) return `the token is invalid (${err.code})`;
  return 'the token is invalid';
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
