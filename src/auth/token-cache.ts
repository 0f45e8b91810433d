/**
 * Verified tokens, kept so a busy client does not pay a signature check per request.
 *
 * Lifecycle: one per app, in memory. A cached token is refused once past its `exp`; at `max`
 * entries the cache is emptied (simplest bound: a flood of distinct tokens costs re-verification,
 * never memory).
 */
import { type Principal, TokenError, type Verifier } from './tokens.ts';

export class TokenCache {
  private readonly map = new Map<string, Principal>();
  constructor(
    private readonly verifier: Verifier,
    private readonly max = 10000,
  ) {}

  async get(token: string): Promise<Principal> {
    const hit = this.map.get(token);
    if (hit !== undefined) {
      if (hit.expiresAt === undefined || hit.expiresAt > Date.now()) return hit;
      this.map.delete(token);
      throw new TokenError('the token has expired');
    }
    const p = await this.verifier.verify(token);
    if (this.map.size >= this.max) this.map.clear();
    this.map.set(token, p);
    return p;
  }
}
