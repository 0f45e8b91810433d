/**
 * The issuers the hub trusts (MERCURE_ISSUERS), each bound to its own keys, and the RFC 9068 checks
 * of draft-08 §Token Validation: `typ` at+jwt, an explicit algorithm allowlist (MERCURE_ALGORITHMS)
 * on top of the per-key pinning of src/auth/keys.ts (so `none`, and HS256 signed with a public key,
 * never verify), `iss` equal to a configured issuer and only that issuer's keys tried (never a pool
 * across issuers), `aud` containing MERCURE_RESOURCE, `exp` required, `nbf` enforced. In
 * compatibility mode a token whose `iss` names no issuer goes to the 0.x keys (legacy-issuer.ts).
 *
 * Lifecycle: built once at start from configuration (keys are read from files then; a bad key or
 * file stops start-up with a message naming the entry); immutable afterwards.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { type JWTPayload, SignJWT, decodeJwt, decodeProtectedHeader } from 'jose';
import { type KeySet, loadKeySet } from '../auth/keys.ts';
import { CLOCK_TOLERANCE_S, TokenError } from '../auth/tokens.ts';
import type { Config, MercureIssuerConfig } from '../config/config.ts';
import { type LegacyIssuer, legacyIssuer } from './legacy-issuer.ts';
import type { TopicSelector } from './match.ts';

/** The type of the hub's authorization details (draft §Authorization Details). */
export const DETAIL_TYPE = 'https://mercure.rocks/authorization-detail';

export type Role = 'publish' | 'subscribe';

interface TrustedKey {
  iss: string;
  role: Role | undefined;
  keys: KeySet;
}

export interface VerifiedToken {
  /** `iss` and `exp` are there unless `legacy`. */
  payload: JWTPayload;
  /** The role of the key that verified it (undefined: both). */
  role: Role | undefined;
  /** Verified by the 0.x keys (compatibility mode): its grants may be in the 0.x claim. */
  legacy: boolean;
}

export class Issuers {
  private readonly byIss = new Map<string, TrustedKey[]>();

  constructor(
    entries: readonly MercureIssuerConfig[],
    private readonly resource: string | undefined,
    private readonly algorithms: readonly string[],
    private readonly legacy?: LegacyIssuer,
  ) {
    if (entries.length > 0 && !resource) {
      throw new Error('MERCURE_ISSUERS needs MERCURE_RESOURCE (the `aud` the hub expects in its tokens)');
    }
    entries.forEach((e, i) => {
      const at = `MERCURE_ISSUERS[${i}]`;
      const keys = loadKeySet({
        secret: e.secret,
        publicKey: e.publicKey ?? (e.publicKeyFile ? readFileSync(e.publicKeyFile, 'utf8') : undefined),
        jwksFile: e.jwksFile,
        names: { secret: `${at}.secret`, publicKey: `${at}.publicKey`, jwksFile: `${at}.jwksFile` },
      });
      if (!keys.algorithms.some((a) => algorithms.includes(a))) {
        throw new Error(
          `${at}: its key verifies ${keys.algorithms.join(', ')}, which MERCURE_ALGORITHMS does not allow`,
        );
      }
      const list = this.byIss.get(e.iss) ?? [];
      list.push({ iss: e.iss, role: e.role, keys });
      this.byIss.set(e.iss, list);
    });
  }

  static fromConfig(config: Config): Issuers {
    return new Issuers(
      config.mercureIssuers,
      config.mercureResource,
      config.mercureAlgorithms,
      legacyIssuer(config),
    );
  }

  get configured(): boolean {
    return this.byIss.size > 0 || this.legacy !== undefined;
  }

  /**
   * Verifies a compact JWS; throws TokenError with the reason (for logs: the answer never says it).
   * `role` is the request's (publish, or subscribe and the subscriptions API): it picks the 0.x key.
   */
  async verify(token: string, role?: Role): Promise<VerifiedToken> {
    let alg: unknown;
    let iss: unknown;
    try {
      alg = decodeProtectedHeader(token).alg;
      iss = decodeJwt(token).iss;
    } catch {
      throw new TokenError('the token is not a compact JWS');
    }
    if (typeof alg !== 'string' || !this.algorithms.includes(alg)) {
      throw new TokenError(`token algorithm ${JSON.stringify(alg)} is not in MERCURE_ALGORITHMS`);
    }
    // Only the keys bound to the claimed issuer: a key of another issuer is never tried.
    const trusted = typeof iss === 'string' ? this.byIss.get(iss) : undefined;
    if (trusted === undefined) {
      if (this.legacy !== undefined && role !== undefined) {
        return { payload: await this.legacy.verify(token, alg, role), role, legacy: true };
      }
      throw new TokenError(`issuer ${JSON.stringify(iss)} is not trusted`);
    }
    let last: unknown = new TokenError(`no key of issuer ${JSON.stringify(iss)} verifies ${alg}`);
    for (const k of trusted) {
      if (!k.keys.algorithms.includes(alg)) continue;
      try {
        const payload = await k.keys.verify(token, {
          issuer: k.iss,
          audience: this.resource,
          typ: 'at+jwt', // jose compares it case-insensitively, without the `application/` prefix
          requiredClaims: ['iss', 'aud', 'exp'],
          clockTolerance: CLOCK_TOLERANCE_S,
        });
        return { payload, role: k.role, legacy: false };
      } catch (err) {
        last = err;
      }
    }
    throw last;
  }
}

export interface MercureMintOptions {
  /** HS256 secret of the issuer (at least 32 bytes). */
  secret: string;
  iss: string;
  /** The hub's resource identifier (MERCURE_RESOURCE). */
  aud: string;
  /** Seconds, or a jose time span ('1h', '15m'). */
  ttl: number | string;
  sub?: string;
  publish?: TopicSelector[];
  subscribe?: TopicSelector[];
  /** The subscribe entry's payload (shown in Mercure subscription events). */
  payload?: Record<string, unknown>;
}

/**
 * Mints an HS256 RFC 9068 access token for the hub (the token CLI, development). Production tokens
 * come from the application or an authorization server, with the same claims.
 */
export async function mintMercureToken(o: MercureMintOptions): Promise<string> {
  const topics = (sels: TopicSelector[]) => sels.map((s) => ({ match: s.match, match_type: s.matchType }));
  const details: Record<string, unknown>[] = [];
  if (o.publish?.length) details.push({ type: DETAIL_TYPE, actions: ['publish'], topics: topics(o.publish) });
  if (o.subscribe?.length) {
    details.push({
      type: DETAIL_TYPE,
      actions: ['subscribe'],
      topics: topics(o.subscribe),
      ...(o.payload ? { payload: o.payload } : {}),
    });
  }
  const jwt = new SignJWT({ client_id: o.iss, authorization_details: details })
    .setProtectedHeader({ alg: 'HS256', typ: 'at+jwt' })
    .setIssuer(o.iss)
    .setAudience(o.aud)
    .setSubject(o.sub ?? 'dev')
    .setIssuedAt()
    .setJti(`urn:uuid:${randomUUID()}`)
    .setExpirationTime(typeof o.ttl === 'number' ? Math.floor(Date.now() / 1000) + o.ttl : o.ttl);
  return jwt.sign(new TextEncoder().encode(o.secret));
}
