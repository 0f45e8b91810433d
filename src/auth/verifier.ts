/**
 * The native verifier: a token signed by a configured key (keys.ts), read into the Principal its
 * `commitfeed` claim grants (tokens.ts), and named by what it says, not how it is encoded
 * (tokenIdentity, for per-token limits).
 */
import { hash } from 'node:crypto';
import { type JWTPayload, decodeProtectedHeader } from 'jose';
import { type VerifyChecks, loadKeySet } from './keys.ts';
import { CLOCK_TOLERANCE_S, type Principal, TokenError, principalFromClaims } from './tokens.ts';

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
