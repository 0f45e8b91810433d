/**
 * Settings of webhooks (docs/webhooks.md): where deliveries may go, how they are retried, when a
 * failing endpoint is disabled.
 */
import { BlockList, isIP } from 'node:net';
import {
  MAX_SETTING_MS,
  bool,
  duration,
  parseDuration,
  setting,
  splitList,
  type Setting,
} from './settings.ts';

const SECTION = 'Webhooks (docs/webhooks.md)';

/** The retry schedule: the wait before each attempt, the first one included (its wait is usually 0). */
function parseSchedule(name: string, raw: string | undefined): number[] {
  const parts = splitList(raw ?? '');
  const ms = parts.map((p) => parseDuration(p));
  if (parts.length === 0 || parts.length > 100 || ms.some((m) => m === undefined || m > MAX_SETTING_MS)) {
    throw new Error(
      `${name} must be a comma-separated list of 1-100 durations with units, such as 0,5s,5m,30m,2h (got ${JSON.stringify(raw)})`,
    );
  }
  return ms as number[];
}

/** Addresses and CIDR blocks (`127.0.0.1`, `10.0.0.0/8`, `::1/128`) as a BlockList. */
export function parseAddressList(
  name: string,
  raw: string | undefined,
): { list: BlockList; entries: string[] } {
  const list = new BlockList();
  const entries = splitList(raw ?? '');
  for (const e of entries) {
    const [addr, bits] = e.split('/');
    const family = isIP(addr);
    const prefix = bits === undefined ? (family === 6 ? 128 : 32) : Number(bits);
    if (family === 0 || !Number.isInteger(prefix) || prefix < 0 || prefix > (family === 6 ? 128 : 32)) {
      throw new Error(
        `${name}: ${JSON.stringify(e)} is not an IP address or CIDR block (such as 10.1.0.0/16)`,
      );
    }
    list.addSubnet(addr, prefix, family === 6 ? 'ipv6' : 'ipv4');
  }
  return { list, entries };
}

export const WEBHOOK_SETTINGS = {
  webhooks: bool(
    'WEBHOOKS',
    true,
    'Run webhook delivery workers here (every replica may: the leases of each endpoint queue share the work out).',
    SECTION,
  ),
  webhookRetrySchedule: setting(
    'WEBHOOK_RETRY_SCHEDULE',
    '0,5s,5m,30m,2h,5h,10h,10h',
    'The wait before each delivery attempt (the first usually 0); each wait gets up to 20% jitter. After the last attempt fails, the delivery is failed (resend it over the API).',
    undefined,
    (raw) => parseSchedule('WEBHOOK_RETRY_SCHEDULE', raw),
  ),
  webhookTimeoutMs: duration(
    'WEBHOOK_TIMEOUT',
    '15s',
    100,
    'Default per-attempt timeout of a delivery (an endpoint may set its own): connecting, sending and the whole response.',
    { max: 300_000 },
  ),
  webhookAllowAddresses: {
    name: 'WEBHOOK_ALLOW_ADDRESSES',
    doc: 'Addresses and CIDR blocks deliveries may connect to although private, loopback or link-local (all such are refused otherwise), comma-separated: 10.1.0.0/16,127.0.0.1.',
    parse: (raw: string | undefined) => parseAddressList('WEBHOOK_ALLOW_ADDRESSES', raw),
  },
  webhookDisableAfterMs: duration(
    'WEBHOOK_DISABLE_AFTER',
    '5d',
    1000,
    'An endpoint whose every attempt failed for this long is disabled (and logged); enable it again over the API.',
    { max: MAX_SETTING_MS },
  ),
  webhookSecretOverlapMs: duration(
    'WEBHOOK_SECRET_OVERLAP',
    '24h',
    0,
    'After a secret rotation, deliveries carry signatures by the old and the new secret for this long (a rotation may give its own).',
    { max: MAX_SETTING_MS },
  ),
} satisfies Record<string, Setting<unknown>>;
