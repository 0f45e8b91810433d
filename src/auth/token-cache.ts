/**
 * Verified tokens, kept so a busy client does not pay a signature check per request. Entries are
 * keyed by tokenCacheKey (the signed content and the signature's bytes), so the spellings of one
 * token share an entry and cannot be used to force a signature check per request.
 *
 * Lifecycle: one per app, in memory. A cached token is refused from its `acceptedUntil` (`exp` plus
 * the clock tolerance verification allows, so first and later uses get the same answer); at `max`
 * entries the cache is emptied (simplest bound: a flood of distinct tokens costs re-verification,
 * never memory).
 */
import { type Principal, TokenError, type Verifier, tokenCacheKey } from './tokens.ts';

export class TokenCache {
  private readonly map = new Map<string, Principal>();
  constructor(
    private readonly verifier: Verifier,
    private readonly max = 10000,
  ) {}

  async get(token: string): Promise<Principal> {
    const key = tokenCacheKey(token);
    const hit = key === undefined ? undefined : this.map.get(key);
    if (hit !== undefined) {
      if (hit.acceptedUntil === undefined || hit.acceptedUntil > Date.now()) return hit;
      this.map.delete(key!);
      throw new TokenError('the token has expired');
    }
    const p = await this.verifier.verify(token);
    if (key === undefined) return p;
    if (this.map.size >= this.max) this.map.clear();
    this.map.set(key, p);
    return p;
  }
}
