/**
 * Standard Webhooks signatures (https://www.standardwebhooks.com, the scheme of Svix): a secret is
 * `whsec_` + base64 of random bytes; a delivery carries `webhook-id`, `webhook-timestamp` (seconds)
 * and `webhook-signature`: `v1,` + base64 HMAC-SHA256 of `id.timestamp.body` keyed by the decoded
 * secret, one per secret, space-separated (during a rotation's overlap the old secret signs too).
 */
import { createHmac, randomBytes } from 'node:crypto';

const PREFIX = 'whsec_';

/** A new signing secret: 32 random bytes (Svix uses 24; the standard allows 24 to 64). */
export function newSecret(): string {
  return PREFIX + randomBytes(32).toString('base64');
}

function key(secret: string): Buffer {
  return Buffer.from(secret.startsWith(PREFIX) ? secret.slice(PREFIX.length) : secret, 'base64');
}

/** The `webhook-signature` value for `body` under each secret. */
export function signatures(secrets: readonly string[], id: string, timestamp: number, body: string): string {
  const content = `${id}.${timestamp}.${body}`;
  return secrets.map((s) => `v1,${createHmac('sha256', key(s)).update(content).digest('base64')}`).join(' ');
}
