// Migrations, start-up and maintenance against each other and against another instance's janitor:
// start-ups (migrate) and `npm run maint` runs (migrate, a janitor pass, feed statistics), each in
// sessions of its own as a new process has, in a loop while a service's janitor drops partitions;
// the janitor's partition changes beside a migration run; and a statistics check that finds a
// partition gone between listing it and analysing it.
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import t from 'tap';
import { loadConfig } from '../src/config/config.ts';
import type { Database } from '../src/db/database.ts';
import { migrate } from '../src/db/migrate.ts';
import { analyzeChanged, dropPartition, feedStats, listPartitions } from '../src/retention/partitions.ts';
import { buildJanitor } from '../src/server.ts';
import { pgClient, sleep, sqlClient, testDatabase, until } from './helpers.ts';

const MINUTE = 60_000;
const DAY = 86_400_000;
/** Partitions the service's janitor drops in its pass (one transaction each) while the loops run. */
const TO_DROP = 60;
/** The application's own tables in the same database (commitfeed beside an outbox's tables). */
const APP_TABLES = 50;
/** Start-ups, and maint runs, at most (each migration run holds off the janitor's next drop). */
const RUNS = 6;
const quiet = { warn() {}, info() {} };

/** Runs `fn` on a pool of its own, as another process would: new sessions, nothing cached. */
async function inNewSessions<R>(url: string, fn: (db: Kysely<Database>) => Promise<R>): Promise<R> {
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  pool.on('error', () => {});
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  try {
    return await fn(db);
  } finally {
    await db.destroy();
  }
}

/**
 * Calls `fn` RUNS times, or fewer when `done` settles first (at least once, though); returns how
 * many calls succeeded and the failures.
 */
async function loop(
  done: Promise<unknown>,
  fn: () => Promise<void>,
): Promise<{ ok: number; failures: string[] }> {
  let finished = false;
  const stop = () => {
    finished = true;
  };
  done.then(stop, stop);
  const out = { ok: 0, failures: [] as string[] };
  do {
    await fn().then(
      () => out.ok++,
      (err: Error) => out.failures.push(err.message),
    );
    // Start-ups come one after another, not back to back: room for the janitor's drops between them.
    await sleep(100);
  } while (!finished && out.ok + out.failures.length < RUNS);
  return out;
}

t.test('start-ups and maint runs beside a janitor dropping partitions', async (t) => {
  const dbUrl = await testDatabase(t);
  const db = sqlClient(t, dbUrl);
  const config = {
    ...loadConfig({}),
    databaseUrl: dbUrl,
    janitorIntervalMs: 0,
    partitionIntervalMs: MINUTE,
    partitionPremake: 1,
    retentionMs: MINUTE,
  };
  // TO_DROP minute partitions after the migration's. A catalog look-up reads tables in the catalog's
  // order: they are made newest first (and after the application's tables), so the oldest, which the
  // janitor drops first, are read last, and every drop during a look-up falls inside it.
  const start = Math.max(...(await listPartitions(db)).map((p) => p.to ?? 0));
  await sql`do $$ begin
      create schema app;
      for i in 1..${sql.lit(APP_TABLES)} loop
        execute format('create table app.t%s (a int8, b text, c int8, d text, e jsonb)', i);
      end loop;
      for i in reverse ${sql.lit(TO_DROP - 1)}..0 loop
        execute format('create table commitfeed.%I partition of commitfeed.feed for values from (%L) to (%L)',
          'feed_p' || to_char(${sql.lit(new Date(start).toISOString())}::timestamptz at time zone 'UTC'
                              + i * interval '1 minute', 'YYYYMMDD_HH24MISS'),
          ${sql.lit(new Date(start).toISOString())}::timestamptz + i * interval '1 minute',
          ${sql.lit(new Date(start).toISOString())}::timestamptz + (i + 1) * interval '1 minute');
      end loop;
    end $$`.execute(db);

  // The service's pass, with its clock past them all: TO_DROP drops, one transaction each.
  const service = buildJanitor(db, config, quiet);
  const before = (await listPartitions(db)).length;
  const pass = service.runOnce(new Date(start + (TO_DROP + 1) * MINUTE));
  // The loops start once it drops (it holds the janitor's lock by then: maint's passes are skipped).
  await until(async () => (await listPartitions(db)).length < before, 10_000, 'the first drop');
  let passEnded = 0;
  const ended = () => {
    passEnded = Date.now();
  };
  pass.then(ended, ended);
  // Bounded: a pass that does not end fails the test rather than looping on.
  const done = Promise.race([
    pass,
    new Promise((_, reject) =>
      setTimeout(() => reject(new Error('the janitor pass took over 20 s')), 20_000).unref(),
    ),
  ]);

  // Replicas starting (a rolling deploy): migrations, in new sessions each time.
  let firstStartup = 0;
  const startups = loop(done, async () => {
    await inNewSessions(dbUrl, migrate);
    firstStartup ||= Date.now();
  });
  // `npm run maint -- run` (its pass is skipped: the service holds the janitor's lock) and `-- stats`.
  const maint = loop(done, () =>
    inNewSessions(dbUrl, async (d) => {
      await migrate(d);
      const run = await buildJanitor(d, config, quiet).runOnce();
      if (run.errors.length > 0) throw new Error(`maint run: ${run.errors.join('; ')}`);
      const stats = await feedStats(d);
      // Only feed_history lacks bounds (MINVALUE); a partition listed as it was dropped must not show.
      const odd = stats.partitions.filter((p) => !p.isDefault && p.to === null && p.name !== 'feed_history');
      if (odd.length > 0) throw new Error(`stats: partitions without bounds: ${odd.map((p) => p.name)}`);
    }),
  );

  const run = await done.then(() => pass);
  const [s, m] = await Promise.all([startups, maint]);
  t.same(run.errors, [], 'the janitor pass made no errors');
  t.ok(
    run.dropped.length >= TO_DROP,
    `it dropped ${run.dropped.length} partitions meanwhile, in ${run.durationMs} ms`,
  );
  t.same(s.failures.slice(0, 3), [], `every start-up migrated (${s.ok} of ${s.ok + s.failures.length} did)`);
  t.same(
    m.failures.slice(0, 3),
    [],
    `every maint run and stats succeeded (${m.ok} of ${m.ok + m.failures.length} did)`,
  );
  t.ok(s.ok + s.failures.length >= 2 && m.ok + m.failures.length >= 2, 'the loops went round');
  // The migrations lock is taken per partition, never for the whole pass.
  t.ok(firstStartup > 0 && firstStartup < passEnded, 'a start-up finished while the pass went on');
});

t.test('partitions are neither made nor dropped while a migration runs', async (t) => {
  const dbUrl = await testDatabase(t);
  const db = sqlClient(t, dbUrl);
  const config = {
    ...loadConfig({}),
    databaseUrl: dbUrl,
    janitorIntervalMs: 0,
    retentionMs: DAY,
  };
  const janitor = buildJanitor(db, config, quiet);
  // Three days on: today's partition is past the retention of 1 day, and a partition is due.
  const later = new Date(Date.now() + 3 * DAY);
  const names = async () => (await listPartitions(db)).map((p) => p.name);
  const before = await names();
  // A migration run in progress (another instance starting) holds the migrations lock.
  const migrating = await pgClient(t, dbUrl);
  await migrating.query(`select pg_advisory_lock(hashtext('commitfeed.migrations'))`);
  const pass = janitor.runOnce(later);
  // The pass waits for it (holding no table lock meanwhile: a publish goes through).
  await until(
    async () =>
      (
        await sql<{ n: number }>`
          select count(*)::int as n from pg_stat_activity
          where wait_event_type = 'Lock' and wait_event = 'advisory' and datname = current_database()`.execute(
          db,
        )
      ).rows[0].n === 1,
    10_000,
    'the pass waiting for the migrations lock',
  );
  t.same(await names(), before, 'nothing made or dropped while the migration runs');
  const published = await sql`select commitfeed.publish('s', '1')`.execute(db);
  t.equal(published.rows.length, 1, 'a publish is not held up by the waiting pass');
  await migrating.query(`select pg_advisory_unlock(hashtext('commitfeed.migrations'))`);
  const run = await pass;
  t.same(run.errors, [], 'the same pass does it once the migration ends');
  t.ok(run.created.length > 0 && run.dropped.length > 0, `made ${run.created} and dropped ${run.dropped}`);
});

t.test('a statistics check skips a partition dropped after it was listed', async (t) => {
  const dbUrl = await testDatabase(t);
  const db = sqlClient(t, dbUrl);
  const parts = await listPartitions(db);
  const doomed = parts.filter((p) => p.from !== null && p.to !== null).at(-1)!;
  // 1,000 rows each in feed_keys and in the partition to drop: both due for an ANALYZE, in name
  // order (feed_keys first). Autovacuum stays off them, so only the check analyses them.
  await db.connection().execute(async (conn) => {
    for (const table of ['feed_keys', doomed.name]) {
      await sql`alter table ${sql.id('commitfeed', table)} set (autovacuum_enabled = false)`.execute(conn);
    }
    await sql`insert into commitfeed.feed_keys (stream, key, txid, id)
              select 's', g::text, '1', g from generate_series(1, 1000) g`.execute(conn);
    await sql`insert into commitfeed.feed (stream, data, created_at)
              select 's', '1', ${new Date(doomed.from!).toISOString()}::timestamptz
              from generate_series(1, 1000)`.execute(conn);
    await sql`select pg_stat_force_next_flush()`.execute(conn);
  });
  const due = async () =>
    (
      await sql<{ n: number }>`
        select count(*)::int as n from pg_stat_user_tables
        where schemaname = 'commitfeed' and relname in ('feed_keys', ${doomed.name})
          and n_mod_since_analyze >= 1000`.execute(db)
    ).rows[0].n === 2;
  await until(due, 10_000, 'the statistics of both tables');
  // The check waits to analyse feed_keys (held by this session) while the partition is dropped.
  const holder = await pgClient(t, dbUrl);
  await holder.query('begin');
  await holder.query('lock table commitfeed.feed_keys in share update exclusive mode');
  const check = analyzeChanged(db).then(
    (analyzed) => ({ analyzed, error: null as string | null }),
    (err: Error) => ({ analyzed: [] as string[], error: err.message }),
  );
  await until(
    async () =>
      (
        await sql<{ n: number }>`
          select count(*)::int as n from pg_stat_activity
          where wait_event_type = 'Lock' and query ilike 'analyze%feed_keys%'`.execute(db)
      ).rows[0].n === 1,
    10_000,
    'the check to wait for feed_keys',
  );
  await dropPartition(db, doomed, 5_000);
  await holder.query('commit');
  const { analyzed, error } = await check;
  t.equal(error, null, 'the check did not fail');
  t.ok(analyzed.includes('commitfeed.feed_keys'), 'it analysed what is still there');
  t.notOk(analyzed.includes(`commitfeed.${doomed.name}`), 'and skipped the dropped partition');
});
