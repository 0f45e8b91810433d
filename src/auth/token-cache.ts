/**
 * Verified tokens (native principals, or the Mercure hub's grants), kept so a busy client does not pay a signature check per request. A token is
 * found by its exact text (the hot path: a map lookup), else by tokenCacheKey (the signed content
 * and the signature's bytes, a hash), so the spellings of one token share one verification and
 * cannot be used to force a signature check per request; a new spelling is then remembered too.
 *
 * Lifecycle: one per app, in memory. A cached token is refused from its `acceptedUntil` (`exp` plus
 * the clock tolerance verification allows, so first and later uses get the same answer); at `max`
 * entries the cache is emptied (simplest bound: a flood of distinct tokens costs re-verification,
 * never memory).
 */
import { hash } from 'node:crypto';
import { type Principal, TokenError } from './tokens.ts';

/** What a verified token is cached as: the native Principal, or the hub's grants (src/mercure). */
export interface Expiring {
  /** When the token stops being accepted, in ms since the epoch; undefined: never by time. */
  acceptedUntil: number | undefined;
}

export class TokenCache<T extends Expiring = Principal> {
  private readonly map = new Map<string, T>();
  constructor(
    private readonly verifier: { verify(token: string): Promise<T> },
    private readonly max = 10000,
  ) {}

  async get(token: string): Promise<T> {
    const exact = this.map.get(token);
    if (exact !== undefined) return this.fresh(exact, token);
    const key = tokenCacheKey(token);
    const hit = key === undefined ? undefined : this.map.get(key);
    if (hit !== undefined) {
      this.remember(token, hit);
      return this.fresh(hit, token);
    }
    const p = await this.verifier.verify(token);
    if (key === undefined) return p;
    this.remember(key, p);
    this.remember(token, p);
    return p;
  }

  /** The principal while its token is accepted; else forgets every entry of the token and throws. */
  private fresh(p: T, token: string): T {
    if (p.acceptedUntil === undefined || p.acceptedUntil > Date.now()) return p;
    this.map.delete(token);
    const key = tokenCacheKey(token);
    if (key !== undefined) this.map.delete(key);
    throw new TokenError('the token has expired');
  }

  private remember(key: string, p: T): void {
    if (this.map.size >= this.max) this.map.clear();
    this.map.set(key, p);
  }
}

const B64URL_RE = /^[A-Za-z0-9_-]*$/;

/**
 * A cache key for a token before it is verified: the signed content as sent (any change to it breaks
 * the signature) and the signature's decoded bytes, so the spellings of one signature share an
 * entry. A token that is not three base64url parts gets no key (it is verified, and refused, every
 * time). Hashed: entries cost the same whatever the token's size.
 */
function tokenCacheKey(token: string): string | undefined {
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
