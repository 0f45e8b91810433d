// Streams feeding queues, the two designs measured side by side on one PostgreSQL, in one run:
//   none    no subscription (the publish path as it is)
//   trigger jobs written in the publishing statement (a statement trigger on the feed with a
//           transition table, enqueueing through commitfeed.enqueue_jobs in the publish transaction)
//   cursor  the durable cursor (src/flows/follower.ts) following the feed in its own transactions
// For each: single-event publishes (8 connections, one event per transaction), batched publishes
// (100 per transaction, 8 connections), and, at a paced 50 events/s, event → job latency (the job
// row's created_at minus the event's). Cursor also: how fast the follower drains a backlog.
//
//   npx tsx bench/flows-design.ts [--quick] [--subs N]
// Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust); the database commitfeed_flows_bench is
// dropped and created.
import { parseArgs } from 'node:util';
import { type Kysely, sql } from 'kysely';
import pg from 'pg';
import { type Database, createDatabase } from '../src/db/database.ts';
import { migrate } from '../src/db/migrate.ts';
import { Feed } from '../src/feed/feed.ts';
import { appendEvents } from '../src/feed/queries/append.ts';
import { Follower } from '../src/flows/follower.ts';
import { createStreamSubscription } from '../src/flows/stream-subscriptions.ts';
import { cpuMark, coresUsed, setBenchDatabase } from './lib/sys.ts';
import { summarize } from './lib/stats.ts';

const { values } = parseArgs({ options: { quick: { type: 'boolean' }, subs: { type: 'string' } } });
const quick = values.quick ?? false;
const SUBS = Number(values.subs ?? 1);
const DB = 'commitfeed_flows_bench';
const ADMIN = 'postgres://postgres@127.0.0.1:5432/postgres';
const URL = `postgres://postgres@127.0.0.1:5432/${DB}`;
const SECONDS = quick ? 3 : 10;
const CONNS = 8;
const log = { warn: () => {}, info: () => {}, error: () => {} };
const say = (m: string) => process.stderr.write(`${m}\n`);

const TRIGGER = `
create or replace function public.feed_to_jobs() returns trigger language plpgsql as $fn$
declare r record;
begin
  for r in
    select s.queue, s.priority, s.max_attempts, s.backoff, count(*)::int as n,
           array_agg(json_build_object('subscription', s.name, 'stream', x.stream, 'type', x.type, 'key', x.key,
                                       'cursor', x.txid::text || '-' || x.id::text, 'data', x.data)
                     order by x.txid, x.id) as payloads
    from new_rows x join commitfeed.subscriptions s
      on s.stream = x.stream and (s.type is null or x.type = s.type) and not s.paused
    group by s.name, s.queue, s.priority, s.max_attempts, s.backoff
  loop
    perform commitfeed.enqueue_jobs(array_fill(r.queue, array[r.n]), r.payloads,
      array_fill(r.priority, array[r.n]), array_fill(0::float8, array[r.n]),
      array_fill(null::timestamptz, array[r.n]), array_fill(null::text, array[r.n]),
      array_fill(r.max_attempts, array[r.n]), array_fill(r.backoff, array[r.n]));
  end loop;
  return null;
end $fn$;
create trigger feed_to_jobs after insert on commitfeed.feed
  referencing new table as new_rows for each statement execute function public.feed_to_jobs();`;

async function fresh(): Promise<void> {
  const admin = new pg.Client({ connectionString: ADMIN });
  await admin.connect();
  await admin.query(`drop database if exists ${DB} with (force)`);
  await admin.query(`create database ${DB}`);
  await admin.end();
}

const event = (i: number) => ({ stream: 'orders', type: 'created', key: null, data: `{"i":${i}}` });

/** `conns` loops appending `batch` events per transaction for SECONDS; events/s and cores. */
async function publishRate(db: Kysely<Database>, batch: number) {
  const end = performance.now() + SECONDS * 1000;
  let n = 0;
  const a = cpuMark(undefined, [process.pid]);
  await Promise.all(
    Array.from({ length: CONNS }, async () => {
      while (performance.now() < end) {
        await appendEvents(
          db,
          Array.from({ length: batch }, () => event(n)),
        );
        n += batch;
      }
    }),
  );
  const b = cpuMark(undefined, [process.pid]);
  const cores = coresUsed(a, b);
  return { rate: n / SECONDS, pg: cores.postgres, node: cores.extra };
}

/** Publishes one event every 20 ms (50/s: well below the single-event commit rate of a loaded
 * 2-core machine, so no queue forms in front of PostgreSQL) for SECONDS, then each event's job latency. */
async function latency(db: Kysely<Database>, queue: string) {
  const start = await sql<{
    id: string;
  }>`select coalesce(max(id), 0)::text as id from commitfeed.feed`.execute(db);
  const from = Number(start.rows[0].id);
  const end = performance.now() + SECONDS * 1000;
  let i = 0;
  const inflight: Promise<unknown>[] = [];
  while (performance.now() < end) {
    inflight.push(appendEvents(db, [event(i++)]));
    await new Promise((r) => setTimeout(r, 20));
  }
  await Promise.all(inflight);
  const deadline = Date.now() + 30_000;
  for (;;) {
    const { rows } = await sql<{ ms: number }>`
      select extract(epoch from j.created_at - f.created_at)::float8 * 1000 as ms
      from commitfeed.feed f
      join commitfeed.jobs j on j.queue = ${queue} and j.payload->>'cursor' = f.txid::text || '-' || f.id::text
      where f.stream = 'orders' and f.id > ${from}`.execute(db);
    if (rows.length >= i || Date.now() > deadline) {
      return { jobs: rows.length, events: i, ...summarize(rows.map((r) => r.ms)) };
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function main(): Promise<void> {
  await fresh();
  setBenchDatabase(DB);
  const { db } = createDatabase({ url: URL, poolSize: CONNS + 2, statementTimeoutMs: 60_000, log });
  await migrate(db);
  const rows: string[] = [];
  const row = (
    design: string,
    single: Awaited<ReturnType<typeof publishRate>>,
    batched: Awaited<ReturnType<typeof publishRate>>,
    lat: { p50: number; p99: number; jobs: number; events: number } | null,
    extra = '',
  ) => {
    const line = `| ${design} | ${Math.round(single.rate).toLocaleString('en')} | ${single.pg.toFixed(2)} | ${Math.round(batched.rate).toLocaleString('en')} | ${batched.pg.toFixed(2)} | ${lat ? `${lat.p50.toFixed(1)} / ${lat.p99.toFixed(1)} (${lat.jobs}/${lat.events})` : '—'} | ${extra} |`;
    rows.push(line);
    say(line);
  };
  const subscribe = async () => {
    for (let s = 0; s < SUBS; s++) {
      await createStreamSubscription(db, {
        name: `s${s}`,
        stream: 'orders',
        type: null,
        queue: `q${s}`,
        priority: 0,
        maxAttempts: 5,
        backoff: '{"type":"exponential","delay":1,"max":3600,"jitter":true}',
        from: 'latest',
      });
    }
  };
  const clear = async () => {
    await sql`truncate commitfeed.jobs`.execute(db);
    await sql`delete from commitfeed.subscriptions`.execute(db);
  };

  say('none: publishing with no subscription');
  row('no subscription', await publishRate(db, 1), await publishRate(db, 100), null);

  say('trigger: jobs written in the publishing statement');
  await subscribe();
  await sql.raw(TRIGGER).execute(db);
  const tSingle = await publishRate(db, 1);
  const tBatch = await publishRate(db, 100);
  const tLat = await latency(db, 'q0');
  row('jobs in the publish (trigger)', tSingle, tBatch, tLat);
  await sql`drop trigger feed_to_jobs on commitfeed.feed`.execute(db);
  await clear();

  say('cursor: the follower, running beside the publishers');
  // The feed's tailer and the follower on pools of their own, as a replica would run them (the
  // publishers keep every connection of theirs busy).
  const { db: tdb } = createDatabase({ url: URL, poolSize: 2, statementTimeoutMs: 60_000, log });
  const feed = new Feed({
    db: tdb,
    databaseUrl: URL,
    batchMaxEvents: 1000,
    pageSize: 1000,
    windowEvents: 10_000,
    pollIntervalMs: 1000,
    heartbeatMs: 15_000,
    sseRetryMs: 1000,
    log,
  });
  await feed.start();
  // How long the tailer takes to see an event (the follower cannot be faster than that).
  const seen: number[] = [];
  feed.watch((events) => {
    const now = Date.now();
    for (const e of events) if (e.stream === 'orders') seen.push(now - e.ms);
  });
  const { db: fdb } = createDatabase({ url: URL, poolSize: 2, statementTimeoutMs: 60_000, log });
  const follower = new Follower({ db: fdb, feed, pageSize: 1000, pollIntervalMs: 1000, log });
  await subscribe();
  follower.start();
  const cSingle = await publishRate(db, 1);
  const cBatch = await publishRate(db, 100);
  // Let the follower finish the backlog the throughput points left (else the latency measures it).
  const caughtUp = Date.now();
  for (;;) {
    const { rows: behind } = await sql<{ n: number }>`
      select count(*)::int as n from commitfeed.feed f, commitfeed.subscriptions s
      where s.name = 's0' and f.stream = 'orders' and (f.txid, f.id) > (s.cursor_txid, s.cursor_id)`.execute(
      db,
    );
    if (behind[0].n === 0) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  say(`follower caught up with the throughput points' events in ${Date.now() - caughtUp} ms`);
  seen.length = 0;
  const cLat = await latency(db, 'q0');
  const tailerLag = summarize(seen);
  say(`tailer sees an event after p50 ${tailerLag.p50.toFixed(1)} / p99 ${tailerLag.p99.toFixed(1)} ms`);
  await follower.stop();
  // Drain: a backlog of events, then one follower pass.
  await clear();
  await subscribe();
  const backlog = quick ? 20_000 : 100_000;
  await sql`select commitfeed.publish('orders', jsonb_build_object('i', g)) from generate_series(1, ${backlog}) g`.execute(
    db,
  );
  const t0 = performance.now();
  const made = await new Follower({ db: fdb, feed, pageSize: 1000, pollIntervalMs: 1000, log }).pass();
  const drain = made / ((performance.now() - t0) / 1000);
  row(
    'durable cursor (follower)',
    cSingle,
    cBatch,
    cLat,
    `drains ${Math.round(drain).toLocaleString('en')} jobs/s per subscription (${made.toLocaleString('en')} backlog, pages of 1,000)`,
  );
  await feed.stop(1000);
  await fdb.destroy();
  await tdb.destroy();
  await db.destroy();

  process.stdout.write(`
Streams feeding queues, ${SUBS} subscription(s) on the published stream; ${SECONDS} s per point, ${CONNS} connections
(\`npx tsx bench/flows-design.ts${quick ? ' --quick' : ''}${SUBS !== 1 ? ` --subs ${SUBS}` : ''}\`)

| design | publish, 1 event/tx (events/s) | PG cores | publish, 100/tx (events/s) | PG cores | event → job p50 / p99 ms at 50/s (jobs/events) | notes |
|---|---:|---:|---:|---:|---:|---|
${rows.join('\n')}
`);
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`${(err as Error).stack}\n`);
    process.exit(1);
  },
);
