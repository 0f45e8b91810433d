/**
 * Trusted keys, from configuration, and the signature check they make. Each key type pins its
 * algorithms: `JWT_SECRET` verifies HS256 only, a PEM public key verifies RS256 (RSA), ES256/ES384
 * (P-256/P-384) or EdDSA (Ed25519), a JWKS file verifies by `kid` with the algorithm of each key.
 * `alg: none`, and an algorithm no configured key is pinned to (e.g. HS256 signed with a public key
 * as the secret), are rejected before any signature check. The native verifier (verifier.ts) and the
 * Mercure hub's issuers load their keys here.
 */
import { createPublicKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import {
  type JSONWebKeySet,
  type JWTPayload,
  type JWTVerifyGetKey,
  type JWTVerifyOptions,
  createLocalJWKSet,
  decodeProtectedHeader,
  errors,
  jwtVerify,
} from 'jose';
import { TokenError } from './tokens.ts';

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
