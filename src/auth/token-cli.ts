/**
 * `npm run token -- --publish 'orders.*' --subscribe '*' --ttl 1h`: mints a development HS256 token
 * with JWT_SECRET (from the environment or .env) and prints it. Each scope flag repeats or takes a
 * comma-separated list; `--admin` adds queue administration and /metrics; `--ttl none` mints a token
 * without expiry. Production tokens come from your identity provider, with the same claim.
 */
import { parseArgs } from 'node:util';
import { loadDotEnv } from '../config.ts';
import { ACTIONS, type Action, mintToken } from './tokens.ts';

loadDotEnv();
const { values } = parseArgs({
  options: {
    publish: { type: 'string', multiple: true },
    subscribe: { type: 'string', multiple: true },
    enqueue: { type: 'string', multiple: true },
    work: { type: 'string', multiple: true },
    admin: { type: 'boolean' },
    ttl: { type: 'string', default: '1h' },
    sub: { type: 'string', default: 'dev' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (values.help) {
  console.log(
    "usage: npm run token -- [--publish P] [--subscribe P] [--enqueue P] [--work P] [--admin] [--ttl 1h|none] [--sub NAME]\n  P: a name or glob ('orders.*', '*'); repeat or comma-separate",
  );
  process.exit(0);
}
const secret = process.env.JWT_SECRET;
if (!secret) {
  console.error('JWT_SECRET is not set (in the environment or .env): it signs the token');
  process.exit(1);
}
const scopes: Partial<Record<Action, string[]>> & { admin?: boolean } = {};
for (const action of ACTIONS) {
  const list = (values[action] ?? [])
    .flatMap((v) => v.split(','))
    .map((v) => v.trim())
    .filter(Boolean);
  if (list.length > 0) scopes[action] = list;
}
if (values.admin) scopes.admin = true;
if (Object.keys(scopes).length === 0) {
  console.error('no scope given: pass --publish, --subscribe, --enqueue, --work and/or --admin');
  process.exit(1);
}
const ttl = values.ttl === 'none' ? undefined : /^\d+$/.test(values.ttl) ? Number(values.ttl) : values.ttl;
try {
  console.log(
    await mintToken({
      secret,
      scopes,
      ttl,
      subject: values.sub,
      issuer: process.env.JWT_ISSUER || undefined,
      audience: process.env.JWT_AUDIENCE || undefined,
    }),
  );
} catch (err) {
  console.error(`could not mint a token: ${(err as Error).message}`);
  process.exit(1);
}
