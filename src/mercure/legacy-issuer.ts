/**
 * The 0.x hub's keys as one implicit issuer (MERCURE_PROTOCOL_COMPATIBILITY=8, with the 0.x hub's own
 * variable names, so existing compose files and Symfony recipes work unchanged):
 * MERCURE_PUBLISHER_JWT_KEY verifies tokens of publish requests only, MERCURE_SUBSCRIBER_JWT_KEY those
 * of subscriptions and the subscriptions API only. The request's role picks the key, never both (0.x
 * recipes often set both to one secret), and each key is pinned to its _ALG (HS256 when unset, as on
 * 0.x hubs). Issuers.verify sends here only a token whose `iss` names no MERCURE_ISSUERS entry: one
 * that names an entry keeps every 1.0 check there.
 *
 * These tokens are checked as the guide's compatibility mode checks them: the signature and the
 * algorithm, and `exp` and `nbf` when present (a float `exp`, as Symfony's LcobucciFactory writes it,
 * is a number too); no `typ`, `aud` or `iss`, and no required `exp`. `alg: none` still never verifies.
 *
 * Lifecycle: built once at start from configuration. A key or algorithm set without the compatibility
 * setting, an _ALG without its key, a short secret, a PEM key given as an HS256 secret, or a key of
 * another algorithm than its _ALG stops start-up with a message naming the variable.
 */
import type { JWTPayload } from 'jose';
import { type KeySet, loadKeySet } from '../auth/keys.ts';
import { CLOCK_TOLERANCE_S, TokenError } from '../auth/tokens.ts';
import type { Config } from '../config/config.ts';

type LegacyRole = 'publish' | 'subscribe';

export interface LegacyIssuer {
  /** Verifies a token of a `role` request with that role's key; throws TokenError with the reason. */
  verify(token: string, alg: string, role: LegacyRole): Promise<JWTPayload>;
}

const VARIABLES = {
  publish: { key: 'MERCURE_PUBLISHER_JWT_KEY', alg: 'MERCURE_PUBLISHER_JWT_ALG' },
  subscribe: { key: 'MERCURE_SUBSCRIBER_JWT_KEY', alg: 'MERCURE_SUBSCRIBER_JWT_ALG' },
} as const;

/** The implicit issuer of the 0.x keys, or undefined when none is set; throws on a bad setting. */
export function legacyIssuer(config: Config): LegacyIssuer | undefined {
  const given = {
    publish: { key: config.mercurePublisherJwtKey, alg: config.mercurePublisherJwtAlg },
    subscribe: { key: config.mercureSubscriberJwtKey, alg: config.mercureSubscriberJwtAlg },
  };
  const keys: Partial<Record<LegacyRole, KeySet>> = {};
  for (const role of ['publish', 'subscribe'] as const) {
    const { key, alg } = given[role];
    const names = VARIABLES[role];
    if ((key || alg) && config.mercureProtocolCompatibility !== 8) {
      throw new Error(
        `${key ? names.key : names.alg} is a Mercure 0.x setting: it needs MERCURE_PROTOCOL_COMPATIBILITY=8, which also accepts tokens without \`typ: at+jwt\`, \`aud\`, \`iss\` or \`exp\` (docs/mercure-migration.md); for 1.0 tokens, list the key in MERCURE_ISSUERS instead`,
      );
    }
    if (alg && !key) throw new Error(`${names.alg} is set but ${names.key} is not`);
    if (key) keys[role] = legacyKeySet(key, alg ?? 'HS256', names, config.mercureAlgorithms);
  }
  if (keys.publish === undefined && keys.subscribe === undefined) return undefined;
  return {
    async verify(token, alg, role) {
      const set = keys[role];
      if (set === undefined) throw new TokenError(`no ${VARIABLES[role].key}: 0.x tokens cannot ${role}`);
      if (!set.algorithms.includes(alg)) {
        throw new TokenError(`${VARIABLES[role].key} verifies ${set.algorithms.join(', ')}, not ${alg}`);
      }
      return set.verify(token, { clockTolerance: CLOCK_TOLERANCE_S });
    },
  };
}

/** One role's key, pinned to `alg`: an HS256 secret (at least 32 bytes) or a PEM public key. */
function legacyKeySet(
  key: string,
  alg: string,
  names: { key: string; alg: string },
  allowed: readonly string[],
): KeySet {
  if (!allowed.includes(alg)) {
    throw new Error(`${names.alg} is ${alg}, which MERCURE_ALGORITHMS does not allow`);
  }
  const keyNames = { secret: names.key, publicKey: names.key, jwksFile: names.key };
  const pem = /-----BEGIN/.test(key);
  if (alg === 'HS256') {
    // A public key used as an HMAC secret is the algorithm-confusion attack: refuse the mix-up.
    if (pem)
      throw new Error(`${names.key} is a PEM key: set ${names.alg} to its algorithm (RS256, ES256, ...)`);
    return loadKeySet({ secret: key, names: keyNames });
  }
  // Environment files often carry a PEM on one line with literal `\n`s.
  const text = pem && !key.includes('\n') ? key.replaceAll('\\n', '\n') : key;
  let set: KeySet;
  try {
    set = loadKeySet({ publicKey: text, names: keyNames });
  } catch (err) {
    throw new Error(`${names.key} must be a PEM public key for ${alg} (${(err as Error).message})`);
  }
  if (!set.algorithms.includes(alg)) {
    throw new Error(`${names.alg} is ${alg} but ${names.key} is a key for ${set.algorithms.join(', ')}`);
  }
  return set;
}
