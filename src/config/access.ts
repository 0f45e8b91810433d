/** Settings of access control: the auth mode, token keys and claims, CORS and per-token limits. */
import { bool, int, optional, type Setting, splitList } from './settings.ts';
import { readFileSync } from 'node:fs';

export const ACCESS_SETTINGS = {
  auth: {
    name: 'AUTH',
    doc: 'jwt requires a token on every non-public route; off disables access control (logged loudly). Unset: jwt when a key below is set; with no key, off on a loopback HOST only (a non-loopback HOST without a key refuses to start).',
    section: 'Access control (docs/access-control.md)',
    parse(raw) {
      if (raw === undefined) return undefined;
      if (raw === 'off' || raw === 'jwt') return raw;
      throw new Error(`AUTH must be "off" or "jwt" (got ${JSON.stringify(raw)})`);
    },
  },
  jwtSecret: optional(
    'JWT_SECRET',
    'HS256 secret, at least 32 bytes (e.g. `openssl rand -base64 32`); `npm run token` signs with it.',
  ),
  jwtPublicKey: {
    name: 'JWT_PUBLIC_KEY',
    doc: 'A PEM public key (RSA: RS256; EC P-256/P-384: ES256/ES384; Ed25519: EdDSA), inline; or JWT_PUBLIC_KEY_FILE, a file holding it.',
    parse(raw, env) {
      if (raw !== undefined) return raw;
      const file = env.JWT_PUBLIC_KEY_FILE;
      return file ? readFileSync(file, 'utf8') : undefined;
    },
  },
  jwksFile: optional('JWKS_FILE', 'A local JSON Web Key Set of public keys, chosen by the token’s `kid`.'),
  jwtIssuer: optional('JWT_ISSUER', 'When set, tokens must carry this issuer (`iss`).'),
  jwtAudience: optional('JWT_AUDIENCE', 'When set, tokens must carry this audience (`aud`).'),
  corsOrigins: {
    name: 'CORS_ORIGINS',
    doc: 'Browser origins allowed by CORS: comma-separated exact origins (https://app.example.com), allowed with credentials, or * (any origin, without credentials). Unset: no CORS headers (same origin only).',
    parse: (raw) => splitList(raw ?? ''),
  },
  maxSsePerToken: int(
    'MAX_SSE_PER_TOKEN',
    100,
    1,
    'SSE connections one token may hold at once; over it, 429 too_many_connections.',
  ),
  metricsRequireAdmin: bool(
    'METRICS_REQUIRE_ADMIN',
    false,
    '/metrics needs a token with admin: true (when access control is on); else it is public.',
  ),
} satisfies Record<string, Setting<unknown>>;
