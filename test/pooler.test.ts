// Behind a real PgBouncer in transaction mode (Debian's pgbouncer, default settings otherwise;
// test/pgbouncer.ts): DATABASE_URL on the pool, DIRECT_DATABASE_URL on PostgreSQL. Publish,
// subscribe, queues, /v1/tx, the janitor and `npm run maint` work through it; SQL published by an
// application through the pool arrives live (the LISTEN is direct), not by the fallback poll; the
// statement timeout holds per transaction, and an exhausted pool gives 503, never a hang; and every
// misconfiguration stops the start with what to set. The delivery promise across PgBouncer restarts
// is the chaos checker's (test/chaos-pooler.test.ts).
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { sql } from 'kysely';
import t, { type Test } from 'tap';
import {
  openSse,
  pgClient,
  publish,
  sqlClient,
  startTestServer,
  testDatabase,
  until,
  within,
} from './helpers.ts';
import { pgbouncerMissing, startPgBouncer } from './pgbouncer.ts';
import { ack, api, claim, enqueue } from './queue-helpers.ts';
import { nodeArgs } from './ts-node-args.ts';

const skip = pgbouncerMissing();
if (skip) t.comment(skip);
const NO_POLL = { pollIntervalMs: 600_000 };
const ROOT = fileURLToPath(new URL('../', import.meta.url));

/** A test database, a PgBouncer in front of it, and the two URLs a deployment would set. */
async function behindPool(t: Test, settings: Record<string, string> = {}) {
  const direct = await testDatabase(t);
  const bouncer = await startPgBouncer(t, direct, settings);
  return { direct, pooled: bouncer.url(direct), bouncer };
}

/** Advisory locks held on the server right now (none may be left behind by a pass). */
async function advisoryLocks(db: ReturnType<typeof sqlClient>): Promise<number> {
  const { rows } = await sql<{ n: number }>`
    select count(*)::int as n from pg_locks where locktype = 'advisory' and database =
      (select oid from pg_database where datname = current_database())`.execute(db);
  return rows[0].n;
}

t.test('pooled mode on the server itself: settings per transaction, nothing at connect', async (t) => {
  // No PgBouncer needed: DATABASE_URL's connections behave as through a pool, DIRECT_DATABASE_URL's
  // as sessions, and the start-up checks pass.
  const direct = await testDatabase(t);
  const s = await startTestServer(t, direct, { directDatabaseUrl: direct, statementTimeoutMs: 1500 });
  const check = sqlClient(t, direct);
  const { rows } = await sql<{ name: string; timeout: string; jit: string }>`
    select application_name as name, current_setting('statement_timeout') as timeout,
           current_setting('jit') as jit from pg_stat_activity where pid = pg_backend_pid()`.execute(s.db);
  t.same(rows[0], { name: '', timeout: '1500ms', jit: 'off' }, 'no application_name sent; SET LOCAL applied');
  const sse = await openSse(t, `${s.url}/v1/streams/plain/events`);
  t.equal((await publish(s.url, 'plain', { data: 1 })).status, 201);
  t.equal((await sse.waitFor(1))[0].data, '1');
  t.equal((await s.janitor.runOnce()).ran, true);
  const { rows: sessions } = await sql<{ n: number }>`
    select count(*)::int as n from pg_stat_activity where datname = current_database()
      and application_name in ('commitfeed', 'commitfeed-listen')`.execute(check);
  t.ok(sessions[0].n >= 2, 'the LISTEN, tail read and janitor connections are named sessions');
});

t.test('through PgBouncer: publish, subscribe, queues, /v1/tx, janitor passes', { skip }, async (t) => {
  const { direct, pooled } = await behindPool(t);
  const s = await startTestServer(t, pooled, { directDatabaseUrl: direct, janitorIntervalMs: 150 });
  const check = sqlClient(t, direct);

  const sse = await openSse(t, `${s.url}/v1/streams/orders/events`);
  t.equal(sse.status, 200);
  const one = await publish(s.url, 'orders', { data: { n: 1 } });
  t.equal(one.status, 201);
  const batch = await publish(s.url, 'orders', [{ data: { n: 2 } }, { data: { n: 3 }, key: 'k3' }]);
  t.equal(batch.status, 201);
  const again = await publish(s.url, 'orders', { data: { n: 3 }, key: 'k3' });
  t.equal(again.body.duplicate, true, 'idempotency keys hold through the pool');
  const got = await sse.waitFor(3);
  t.same(
    got.map((m) => JSON.parse(m.data!).n),
    [1, 2, 3],
  );
  t.equal(got[0].id, one.body.id);
  // Catch-up from the table (prepared statements are off on the pool; these run unnamed).
  const page = await api(s.url, 'GET', '/v1/streams/orders/events?from=earliest&limit=10');
  t.equal(page.status, 200);
  t.equal(page.body.events.length, 3);

  const enq = await enqueue(s.url, 'mail', { payload: { to: 'a' } });
  t.equal(enq.status, 201);
  const [job] = await claim(s.url, 'mail', { wait: 2 });
  t.same(job.payload, { to: 'a' });
  t.equal((await ack(s.url, 'mail', job.id, job.lease)).status, 204);

  const tx = await api(s.url, 'POST', '/v1/tx', {
    ops: [{ publish: { stream: 'orders', data: { n: 4 } } }, { enqueue: { queue: 'mail', payload: 2 } }],
  });
  t.equal(tx.status, 200, JSON.stringify(tx.body));
  t.equal(JSON.parse((await sse.waitFor(4))[3].data!).n, 4);

  // The janitor's advisory lock is taken and released on its own session: pass after pass runs.
  const runs = s.janitor.stats.runs;
  await until(() => s.janitor.stats.runs >= runs + 5, 20_000, 'five more janitor passes');
  t.equal(s.janitor.stats.skipped, 0, 'no pass found the lock held');
  const run = await s.janitor.runOnce();
  t.equal(run.ran, true);
  t.same(run.errors, []);
  await s.close();
  t.equal(await advisoryLocks(check), 0, 'no advisory lock left behind');
});

t.test('SQL published through the pool arrives live, long before the fallback poll', { skip }, async (t) => {
  const { direct, pooled } = await behindPool(t);
  const s = await startTestServer(t, pooled, { directDatabaseUrl: direct, ...NO_POLL });
  const ready = await api(s.url, 'GET', '/readyz');
  t.equal(ready.status, 200);
  const sse = await openSse(t, `${s.url}/v1/streams/outbox/events`);
  // An application's own connection through the pool, as psql would open it (no startup settings).
  const app = await pgClient(t, pooled);
  for (let i = 1; i <= 5; i++) {
    const started = Date.now();
    if (i % 2 === 0) {
      await app.query('begin');
      await app.query(`select commitfeed.publish('outbox', $1::jsonb)`, [JSON.stringify({ i })]);
      await app.query('commit');
    } else await app.query(`select commitfeed.publish('outbox', $1::jsonb)`, [JSON.stringify({ i })]);
    const [m] = (await sse.waitFor(i, 3000)).slice(i - 1);
    t.equal(JSON.parse(m.data!).i, i, `event ${i} (${Date.now() - started} ms; the poll is 10 minutes away)`);
  }
  t.ok(s.feed.listener.stats.notifications >= 5, 'woken by the NOTIFYs');
});

t.test('the statement timeout holds in every pooled transaction and autocommit', { skip }, async (t) => {
  const { direct, pooled } = await behindPool(t);
  const s = await startTestServer(t, pooled, { directDatabaseUrl: direct, statementTimeoutMs: 700 });
  const show = async (name: string) =>
    (await sql<{ v: string }>`select current_setting(${name}) as v`.execute(s.db)).rows[0].v;
  t.equal(await show('statement_timeout'), '700ms', 'an autocommit statement');
  t.equal(await show('jit'), 'off');
  await s.db.transaction().execute(async (trx) => {
    t.equal(
      (await sql<{ v: string }>`select current_setting('statement_timeout') as v`.execute(trx)).rows[0].v,
      '700ms',
    );
  });
  const started = Date.now();
  await t.rejects(sql`select pg_sleep(5)`.execute(s.db), { code: '57014' }, 'autocommit cancelled');
  await t.rejects(
    s.db.transaction().execute((trx) => sql`select pg_sleep(5)`.execute(trx)),
    { code: '57014' },
    'transaction cancelled',
  );
  t.ok(Date.now() - started < 4000, 'both within the timeout, not the sleep');
  // Nothing of it stays on the server connections other clients get.
  const other = await pgClient(t, pooled);
  t.equal((await other.query('show statement_timeout')).rows[0].statement_timeout, '0');

  // A stalled database: the feed locked by a transaction held on the server. Publishes and
  // table reads answer 503 within the timeout.
  const holder = await pgClient(t, direct);
  await holder.query('begin');
  await holder.query('lock table commitfeed.feed in access exclusive mode');
  const res = await within(publish(s.url, 'stalled', { data: 1 }), 10_000, 'a publish against a locked feed');
  t.equal(res.status, 503);
  const read = await within(
    api(s.url, 'GET', '/v1/streams/stalled/events?from=earliest'),
    10_000,
    'a read against a locked feed',
  );
  t.equal(read.status, 503);
  await holder.query('rollback');
  t.equal((await publish(s.url, 'stalled', { data: 2 })).status, 201, 'and work again once it ends');
});

t.test(
  'a pool that lends no server connection: 503 within the timeout, never a hang',
  { skip },
  async (t) => {
    const { direct, pooled } = await behindPool(t, { default_pool_size: '1' });
    const s = await startTestServer(t, pooled, { directDatabaseUrl: direct, statementTimeoutMs: 800 });
    // Another client holds the pool's only server connection.
    const hog = await pgClient(t, pooled);
    await hog.query('begin');
    await hog.query('select 1');
    const started = Date.now();
    const res = await within(publish(s.url, 'starved', { data: 1 }), 10_000, 'a publish on a starved pool');
    t.equal(res.status, 503, JSON.stringify(res.body));
    t.ok(Date.now() - started < 5000, `answered in ${Date.now() - started} ms`);
    await hog.query('commit');
    await until(
      async () => (await publish(s.url, 'starved', { data: 2 })).status === 201,
      10_000,
      'a publish once the pool lends again',
    );
  },
);

t.test('the start-up check names a pool where a session is needed', { skip }, async (t) => {
  const config = { janitorIntervalMs: 0 };
  // Default PgBouncer: the pool's connect-time settings are refused.
  const plain = await behindPool(t);
  await t.rejects(
    startTestServer(t, plain.pooled, config),
    /DATABASE_URL refused a setting sent at connect \(unsupported startup parameter: \w+\): it is a connection pooler .*set DIRECT_DATABASE_URL to the PostgreSQL server itself/,
    'DIRECT_DATABASE_URL absent, default PgBouncer',
  );
  // The usual workaround (ignore them) gets past connect: the LISTEN then misses other connections'
  // NOTIFYs, and the check says so instead of starting a deaf service.
  const lenient = await behindPool(t, { ignore_startup_parameters: 'statement_timeout, options' });
  const started = Date.now();
  await t.rejects(
    startTestServer(t, lenient.pooled, config),
    /DATABASE_URL looks like a transaction-mode connection pool .* set DIRECT_DATABASE_URL to the PostgreSQL server itself/,
    'DIRECT_DATABASE_URL absent, startup parameters ignored',
  );
  t.ok(Date.now() - started < 15_000, 'a bounded wait');
  await t.rejects(
    startTestServer(t, plain.pooled, { ...config, directDatabaseUrl: plain.pooled }),
    /DIRECT_DATABASE_URL is not a session of its own: .* set DIRECT_DATABASE_URL to the PostgreSQL server itself/,
    'DIRECT_DATABASE_URL pointed at the pool',
  );
});

t.test(
  'PREPARED_STATEMENTS=true through a pool that cannot keep them stops the start',
  { skip },
  async (t) => {
    const { direct, pooled } = await behindPool(t);
    await t.rejects(
      startTestServer(t, pooled, { directDatabaseUrl: direct, preparedStatements: true }),
      /PREPARED_STATEMENTS=true, but a named prepared statement .* was gone in the next/,
    );
    // The same check passes where statements do survive (the server itself as DATABASE_URL).
    const s = await startTestServer(t, direct, { directDatabaseUrl: direct, preparedStatements: true });
    t.equal((await publish(s.url, 'p', { data: 1 })).status, 201);
  },
);

t.test(
  'npm run maint through the pool: the migrations lock and the janitor on DIRECT_DATABASE_URL',
  { skip },
  async (t) => {
    const { direct, pooled } = await behindPool(t);
    const s = await startTestServer(t, pooled, { directDatabaseUrl: direct });
    t.equal((await publish(s.url, 'm', { data: 1 })).status, 201);
    const maint = async (command: string) => {
      const proc = spawn(process.execPath, [...nodeArgs('src/cli/maint.ts'), command], {
        cwd: ROOT,
        env: { ...process.env, DATABASE_URL: pooled, DIRECT_DATABASE_URL: direct, LOG_LEVEL: 'silent' },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      t.teardown(() => proc.kill('SIGKILL'));
      let out = '';
      proc.stdout.on('data', (d) => (out += d));
      proc.stderr.on('data', (d) => (out += d));
      const code = await within(
        new Promise<number | null>((r) => proc.on('exit', r)),
        60_000,
        () => `npm run maint -- ${command} (output so far: ${out})`,
      );
      return { code, out };
    };
    // `stats` migrates first too: a migrations lock left on a pooled server connection would hang it.
    for (const command of ['run', 'stats']) {
      const r = await maint(command);
      t.equal(r.code, 0, `maint ${command}: ${r.out.slice(0, 300)}`);
      if (command === 'run') t.match(r.out, /"ran": true/);
    }
    t.equal(await advisoryLocks(sqlClient(t, direct)), 0, 'no advisory lock left behind');
  },
);
