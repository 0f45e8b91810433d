/**
 * `npm run token -- --publish 'orders.*' --subscribe '*' --ttl 1h`: mints a development HS256 token
 * with JWT_SECRET (from the environment or .env) and prints it. Each scope flag repeats or takes a
 * comma-separated list; `--admin` adds queue administration and /metrics; `--ttl none` mints a token
 * without expiry. Production tokens come from your identity provider, with the same claim.
 *
 * `npm run token -- --mercure --publish https://example.com/books/1 --subscribe-pattern
 * 'https://example.com/books/:id'`: a Mercure hub token instead (RFC 9068 at+jwt), signed with the
 * secret of the first MERCURE_ISSUERS entry that has one (or of `--iss`), for MERCURE_RESOURCE.
 * Topics are exact (`--publish`, `--subscribe`) or URL patterns (`--publish-pattern`,
 * `--subscribe-pattern`); `*` is every topic. They are not comma-separated (URLs may hold commas).
 */
import { parseArgs } from 'node:util';
import { loadConfig, loadDotEnv } from '../config/config.ts';
import type { TopicSelector } from '../mercure/match.ts';
import { mintMercureToken } from '../mercure/issuers.ts';
import { ACTIONS, type Action, mintToken } from '../auth/tokens.ts';

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
    mercure: { type: 'boolean' },
    'publish-pattern': { type: 'string', multiple: true },
    'subscribe-pattern': { type: 'string', multiple: true },
    iss: { type: 'string' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (values.help) {
  console.log(
    "usage: npm run token -- [--publish P] [--subscribe P] [--enqueue P] [--work P] [--admin] [--ttl 1h|none] [--sub NAME]\n  P: a name or glob ('orders.*', '*'); repeat or comma-separate\n" +
      '       npm run token -- --mercure [--publish T] [--subscribe T] [--publish-pattern U] [--subscribe-pattern U] [--iss ISS] [--ttl 1h] [--sub NAME]\n  T: an exact topic or *; U: a URL pattern; repeat for more',
  );
  process.exit(0);
}
if (values.mercure) {
  const config = loadConfig();
  const issuer = config.mercureIssuers.find(
    (i) => i.secret && (values.iss === undefined || i.iss === values.iss),
  );
  if (!issuer?.secret || !config.mercureResource) {
    console.error(
      'a Mercure token needs MERCURE_RESOURCE and a MERCURE_ISSUERS entry with a "secret" (the one of --iss, if given)',
    );
    process.exit(1);
  }
  const sels = (exact: string[] = [], patterns: string[] = []): TopicSelector[] => [
    ...exact.map((match) => ({ match, matchType: 'exact' as const })),
    ...patterns.map((match) => ({ match, matchType: 'urlpattern' as const })),
  ];
  const publish = sels(values.publish, values['publish-pattern']);
  const subscribe = sels(values.subscribe, values['subscribe-pattern']);
  if (publish.length + subscribe.length === 0 || values.ttl === 'none') {
    console.error('a Mercure token needs a --publish or --subscribe topic, and an expiry (--ttl)');
    process.exit(1);
  }
  const ttl = /^\d+$/.test(values.ttl) ? Number(values.ttl) : values.ttl;
  console.log(
    await mintMercureToken({
      secret: issuer.secret,
      iss: issuer.iss,
      aud: config.mercureResource,
      ttl,
      sub: values.sub,
      publish,
      subscribe,
    }),
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
