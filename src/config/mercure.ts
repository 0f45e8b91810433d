/**
 * Settings of the Mercure hub: the issuers it trusts and their keys, its resource identifier, the
 * algorithms, anonymous subscribers, the cookie and its CSRF origins, active (Mercure) subscriptions,
 * and the 0.x compatibility mode with the 0.x hub's own key variables (checked together at start-up,
 * where the hub builds its issuers: src/mercure/legacy-issuer.ts).
 */
import {
  MAX_SETTING_MS,
  bool,
  duration,
  parseOrigins,
  setting,
  text,
  splitList,
  type Setting,
} from './settings.ts';

/** One trusted issuer of Mercure tokens and one source of its keys (MERCURE_ISSUERS). */
export interface MercureIssuerConfig {
  /** Compared with the token's `iss` exactly. */
  iss: string;
  /** HS256 secret, at least 32 bytes. */
  secret?: string;
  /** PEM public key, inline or in a file. */
  publicKey?: string;
  publicKeyFile?: string;
  /** A local JSON Web Key Set of public keys. */
  jwksFile?: string;
  /** Tokens verified by this key may only publish, or only subscribe (separate keys per role). */
  role?: 'publish' | 'subscribe';
}

const ISSUER_KEYS = ['secret', 'publicKey', 'publicKeyFile', 'jwksFile'] as const;

/** MERCURE_ISSUERS: a JSON list of issuers, each with exactly one key source. */
function parseMercureIssuers(raw: string): MercureIssuerConfig[] {
  const fail = (why: string): never => {
    throw new Error(`MERCURE_ISSUERS ${why}`);
  };
  let list: unknown;
  try {
    list = JSON.parse(raw);
  } catch {
    fail('must be JSON: [{"iss": "...", "secret": "..."}]');
  }
  if (!Array.isArray(list)) return fail('must be a JSON list of issuers');
  return list.map((e: unknown, i) => {
    if (typeof e !== 'object' || e === null || Array.isArray(e)) return fail(`[${i}] must be an object`);
    const entry = e as Record<string, unknown>;
    for (const k of Object.keys(entry)) {
      if (!['iss', 'role', ...ISSUER_KEYS].includes(k)) fail(`[${i}]: unknown member ${JSON.stringify(k)}`);
    }
    if (typeof entry.iss !== 'string' || entry.iss === '') fail(`[${i}].iss must be a non-empty string`);
    const sources = ISSUER_KEYS.filter((k) => entry[k] !== undefined);
    if (sources.length !== 1) fail(`[${i}] needs exactly one of ${ISSUER_KEYS.join(', ')}`);
    if (typeof entry[sources[0]] !== 'string' || entry[sources[0]] === '')
      fail(`[${i}].${sources[0]} must be a non-empty string`);
    if (entry.role !== undefined && entry.role !== 'publish' && entry.role !== 'subscribe') {
      fail(`[${i}].role must be "publish" or "subscribe"`);
    }
    return entry as unknown as MercureIssuerConfig;
  });
}

/** Algorithms a 0.x key variable may name: HS256 for a secret, the others for a PEM public key. */
export const LEGACY_ALGORITHMS = ['HS256', 'RS256', 'ES256', 'ES384', 'EdDSA'] as const;
export type LegacyAlgorithm = (typeof LEGACY_ALGORITHMS)[number];

/** MERCURE_{PUBLISHER,SUBSCRIBER}_JWT_KEY, the 0.x hub's variable (a secret, or a PEM public key). */
function legacyKey(role: 'PUBLISHER' | 'SUBSCRIBER', verifies: string): Setting<string | undefined> {
  return {
    name: `MERCURE_${role}_JWT_KEY`,
    doc: `With MERCURE_PROTOCOL_COMPATIBILITY=8: the 0.x hub's ${role.toLowerCase()} key (an HS256 secret of at least 32 bytes, or a PEM public key), verifying tokens without a MERCURE_ISSUERS \`iss\` on ${verifies} only. Refused without the compatibility setting.`,
    parse: (raw) => raw,
  };
}

/** MERCURE_{PUBLISHER,SUBSCRIBER}_JWT_ALG: the algorithm its key verifies (the 0.x default HS256). */
function legacyAlg(role: 'PUBLISHER' | 'SUBSCRIBER'): Setting<LegacyAlgorithm | undefined> {
  const name = `MERCURE_${role}_JWT_ALG`;
  return {
    name,
    doc: `The algorithm of MERCURE_${role}_JWT_KEY: ${LEGACY_ALGORITHMS.join(', ')} (unset: HS256).`,
    parse(raw) {
      if (raw === undefined) return undefined;
      const alg = LEGACY_ALGORITHMS.find((a) => a === raw.trim());
      if (alg === undefined) {
        throw new Error(
          `${name} must be one of ${LEGACY_ALGORITHMS.join(', ')} (got ${JSON.stringify(raw)})`,
        );
      }
      return alg;
    },
  };
}

export const MERCURE_SETTINGS = {
  mercureIssuers: {
    name: 'MERCURE_ISSUERS',
    default: '[]',
    doc: 'Issuers of Mercure hub tokens, as JSON: [{"iss": "https://app.example.com", "secret" | "publicKey" | "publicKeyFile" | "jwksFile": ..., "role"?: "publish" | "subscribe"}]. Each key verifies only tokens whose `iss` equals its entry\'s.',
    section: 'Mercure hub: authorization (docs/mercure-auth.md)',
    parse: (raw) => parseMercureIssuers(raw ?? '[]'),
  },
  mercureResource: {
    name: 'MERCURE_RESOURCE',
    doc: "The hub's resource identifier, which tokens must carry in `aud`: its public URL, e.g. https://hub.example.com/.well-known/mercure (required with MERCURE_ISSUERS).",
    parse(raw) {
      if (raw === undefined) return undefined;
      let ok = false;
      try {
        const u = new URL(raw);
        ok = (u.protocol === 'https:' || u.protocol === 'http:') && u.hash === '' && u.search === '';
      } catch {
        // reported below
      }
      if (!ok)
        throw new Error(
          `MERCURE_RESOURCE must be an http(s) URL without query or fragment (got ${JSON.stringify(raw)})`,
        );
      return raw;
    },
  },
  mercureAlgorithms: setting(
    'MERCURE_ALGORITHMS',
    'EdDSA,ES256,ES384,RS256,HS256',
    'Signature algorithms the hub accepts, comma-separated; a key still verifies only its own algorithm, and `none` is never accepted.',
    undefined,
    (raw) => {
      const list = splitList(raw ?? '');
      const known = [
        'EdDSA',
        'ES256',
        'ES384',
        'RS256',
        'RS384',
        'RS512',
        'PS256',
        'PS384',
        'PS512',
        'HS256',
      ];
      const bad = list.filter((a) => !known.includes(a));
      if (list.length === 0 || bad.length > 0) {
        throw new Error(
          `MERCURE_ALGORITHMS must list some of ${known.join(', ')} (got ${JSON.stringify(raw)})`,
        );
      }
      return list;
    },
  ),
  mercureAnonymous: bool(
    'MERCURE_ANONYMOUS',
    false,
    'Subscribers without a token may connect and receive public updates (never private ones); false: the hub requires a token to subscribe.',
  ),
  mercureCookie: text(
    'MERCURE_COOKIE',
    '__Secure-mercure_access_token',
    'Cookie the hub reads the token from when the request has no Authorization header (for EventSource).',
  ),
  mercurePublishOrigins: {
    name: 'MERCURE_PUBLISH_ORIGINS',
    doc: 'Origins (scheme://host[:port]) whose pages may publish with the cookie, checked against Origin, else Referer (CSRF). Unset: publishing with the cookie is refused; the Authorization header is unaffected.',
    parse: (raw) => parseOrigins('MERCURE_PUBLISH_ORIGINS', raw ?? ''),
  },
  mercureSubscriptions: bool(
    'MERCURE_SUBSCRIPTIONS',
    false,
    "Active subscriptions: each Mercure subscription's start and end (one per matcher of a hub connection) published as a private update on <hub>/subscriptions/{match_type}/{match}/{subscriber}, and the Mercure subscriptions API.",
  ),
  mercureInstanceLeaseMs: duration(
    'MERCURE_INSTANCE_LEASE',
    '30s',
    1000,
    'An instance renews its lease every third of this; when it dies, another instance publishes `active: false` for its Mercure subscriptions once the lease has run out.',
    { max: MAX_SETTING_MS },
  ),
  mercureProtocolCompatibility: {
    name: 'MERCURE_PROTOCOL_COMPATIBILITY',
    doc: 'Set to 8 to also accept Mercure 0.x clients beside 1.0 ones (`topic=` selectors and URI Templates, the `mercure` claim, tokens without `typ: at+jwt`, `aud`, `exp` or a matching `iss`, the `mercureAuthorization` cookie and `authorization` query parameter, 0.x subscription events and routes). It weakens token validation; unset: 1.0 only. See docs/mercure-migration.md.',
    section: 'Mercure hub: 0.x compatibility (docs/mercure-migration.md)',
    parse(raw): 8 | undefined {
      if (raw === undefined) return undefined;
      if (raw.trim() === '8') return 8;
      throw new Error(
        `MERCURE_PROTOCOL_COMPATIBILITY must be 8 (accept Mercure 0.x clients too) or unset (got ${JSON.stringify(raw)})`,
      );
    },
  },
  mercurePublisherJwtKey: legacyKey('PUBLISHER', 'publish requests'),
  mercurePublisherJwtAlg: legacyAlg('PUBLISHER'),
  mercureSubscriberJwtKey: legacyKey('SUBSCRIBER', 'subscribe requests and the subscriptions API'),
  mercureSubscriberJwtAlg: legacyAlg('SUBSCRIBER'),
} satisfies Record<string, Setting<unknown>>;
