// Configuration is defined once (src/config/ SETTINGS): .env.example and docs/configuration.md
// must list exactly its variables and defaults, and bad values stop start-up naming the variable.
import { readFileSync } from 'node:fs';
import t from 'tap';
import { documentedVariables, loadConfig, RENAMED } from '../src/config/config.ts';
import { parseDuration } from '../src/config/settings.ts';

const root = new URL('../', import.meta.url);
const read = (file: string) => readFileSync(new URL(file, root), 'utf8');
const expected = new Map(documentedVariables().map((v) => [v.name, v.default]));
const regenerate = 'regenerate with `npx tsx src/cli/config-docs.ts env|table`';

t.test('.env.example lists every variable with its default, and nothing else', async (t) => {
  const listed = new Map<string, string | undefined>();
  for (const line of read('.env.example').split('\n')) {
    const set = /^([A-Z][A-Z0-9_]*)=(.*)$/.exec(line);
    const unset = /^# ([A-Z][A-Z0-9_]*)=$/.exec(line);
    const m = set ?? unset;
    if (!m) continue;
    t.notOk(listed.has(m[1]), `${m[1]} is listed once`);
    listed.set(m[1], set ? m[2] : undefined);
  }
  t.same([...listed.keys()], [...expected.keys()], `the same variables in the same order (${regenerate})`);
  for (const [name, dflt] of expected) {
    t.equal(listed.get(name), dflt, `${name}: .env.example says the default of config.ts`);
  }
});

t.test('docs/configuration.md lists every variable with its default, and nothing else', async (t) => {
  const listed = new Map<string, string | undefined>();
  for (const line of read('docs/configuration.md').split('\n')) {
    const m = /^\| `([A-Z][A-Z0-9_]*)` \| (unset|`([^`]*)`) \|/.exec(line);
    if (!m) continue;
    t.notOk(listed.has(m[1]), `${m[1]} is listed once`);
    listed.set(m[1], m[2] === 'unset' ? undefined : m[3]);
  }
  t.same([...listed.keys()], [...expected.keys()], `the same variables in the same order (${regenerate})`);
  for (const [name, dflt] of expected) {
    t.equal(listed.get(name), dflt, `${name}: the docs say the default of config.ts`);
  }
});

t.test('the documented defaults are what loadConfig uses', async (t) => {
  // Setting every variable to its documented default changes nothing.
  const env: Record<string, string> = {};
  for (const [name, dflt] of expected) if (dflt !== undefined) env[name] = dflt;
  t.same(loadConfig(env), loadConfig({}));
  const c = loadConfig({});
  t.equal(c.pollIntervalMs, 1000);
  t.equal(c.retentionMs, 7 * 86_400_000);
  t.equal(c.janitorIntervalMs, 5 * 60_000);
  t.equal(c.port, 3000);
  t.equal(c.databaseUrl, undefined);
  t.same(c.corsOrigins, []);
});

t.test('durations take a unit, and every duration variable reads one', async (t) => {
  t.equal(parseDuration('250ms'), 250);
  t.equal(parseDuration('1.5s'), 1500);
  t.equal(parseDuration('30m'), 1_800_000);
  t.equal(parseDuration('12h'), 43_200_000);
  t.equal(parseDuration('7d'), 604_800_000);
  t.equal(parseDuration('0'), 0, 'zero needs no unit');
  t.equal(parseDuration('250'), undefined, 'a bare number is ambiguous');
  t.equal(parseDuration('5 minutes'), undefined);
  t.equal(parseDuration('-1s'), undefined);

  const c = loadConfig({
    POLL_INTERVAL: '250ms',
    HEARTBEAT_INTERVAL: '20s',
    SSE_RETRY: '0',
    STATEMENT_TIMEOUT: '1m',
    SLOW_SUBSCRIBER_TIMEOUT: '45s',
    JANITOR_LOCK_TIMEOUT: '500ms',
    RETENTION: '12h',
    PARTITION_INTERVAL: '1h',
    DEDUP_WINDOW: '2d',
    JANITOR_INTERVAL: '0',
  });
  t.same(
    [
      c.pollIntervalMs,
      c.heartbeatMs,
      c.sseRetryMs,
      c.statementTimeoutMs,
      c.slowSubscriberMaxMs,
      c.janitorLockTimeoutMs,
      c.retentionMs,
      c.partitionIntervalMs,
      c.dedupWindowMs,
      c.janitorIntervalMs,
    ],
    [250, 20_000, 0, 60_000, 45_000, 500, 43_200_000, 3_600_000, 172_800_000, 0],
  );
});

t.test('a bad value stops start-up with an error naming the variable', async (t) => {
  t.throws(() => loadConfig({ POLL_INTERVAL: '250' }), /^POLL_INTERVAL must be a duration with a unit/);
  t.throws(() => loadConfig({ RETENTION: 'a week' }), /RETENTION must be a duration .* \(got "a week"\)/);
  t.throws(() => loadConfig({ POLL_INTERVAL: '5ms' }), /POLL_INTERVAL .* 10ms to /, 'below the minimum');
  t.throws(
    () => loadConfig({ HEARTBEAT_INTERVAL: '30d' }),
    /HEARTBEAT_INTERVAL/,
    'beyond what a timer holds',
  );
  t.throws(() => loadConfig({ POOL_SIZE: '1' }), /POOL_SIZE must be an integer >= 2 \(got "1"\)/);
  t.throws(() => loadConfig({ PORT: '80.5' }), /PORT must be an integer/);
  t.throws(() => loadConfig({ PORT: '1e3' }), /PORT must be an integer/);
  t.throws(
    () => loadConfig({ PREPARED_STATEMENTS: 'maybe' }),
    /PREPARED_STATEMENTS must be auto, true or false/,
  );
  t.throws(
    () => loadConfig({ DIRECT_DATABASE_URL: 'postgres://db:5432/app' }),
    /DIRECT_DATABASE_URL is set without DATABASE_URL/,
  );
  t.throws(() => loadConfig({ AUTH: 'maybe' }), /AUTH must be "off" or "jwt"/);
  t.equal(loadConfig({ POOL_SIZE: '' }).poolSize, 10, 'an empty variable means the default');
  t.equal(
    loadConfig({}).preparedStatements,
    undefined,
    'PREPARED_STATEMENTS=auto: DIRECT_DATABASE_URL decides',
  );
  t.equal(loadConfig({ PREPARED_STATEMENTS: 'off' }).preparedStatements, false);
  t.equal(loadConfig({ PREPARED_STATEMENTS: 'true' }).preparedStatements, true);
});

t.test('the *_MS names of before are refused with their new name', async (t) => {
  t.ok(Object.keys(RENAMED).length > 0);
  for (const [old, now] of Object.entries(RENAMED)) {
    t.notOk(expected.has(old), `${old} is no longer documented`);
    t.ok(expected.has(now), `${now} is documented`);
    t.throws(() => loadConfig({ [old]: '1500' }), new RegExp(`^${old} is no longer read: set ${now}=1500ms`));
  }
  t.throws(() => loadConfig({ HEARTBEAT_MS: '15000' }), /set HEARTBEAT_INTERVAL=15s instead/);
});

t.test('no other variable of the table looks like a unitless duration', async (t) => {
  for (const name of expected.keys()) t.notMatch(name, /_MS$|_SECONDS$/, `${name}: durations take units`);
});
