// enqueueJobs, a thin call to commitfeed.enqueue_jobs (the one enqueue implementation): results in
// input order, key dedup (repeated within the call, held by a job not yet completed, freed by an ack,
// raced by a concurrent transaction), one wake-up row per queue, bad input refused with nothing written.
import { sql } from 'kysely';
import t, { type Test } from 'tap';
import { migrate } from '../src/db/migrate.ts';
import { enqueueJobs } from '../src/queues/enqueue.ts';
import { type JobBody, toJobInput } from '../src/queues/validate.ts';
import { pgClient, sqlClient, testDatabase } from './helpers.ts';

const job = (queue: string, body: JobBody) => toJobInput(queue, body, 1 << 20);

async function setup(t: Test) {
  const url = await testDatabase(t);
  const db = sqlClient(t, url);
  await migrate(db);
  return { url, db };
}

type Db = Awaited<ReturnType<typeof setup>>['db'];

const wakeRows = async (db: Db) =>
  (
    await sql<{ stream: string; type: string; data: string }>`
      select stream, type, data::text as data from commitfeed.feed order by txid, id`.execute(db)
  ).rows.map((r) => [r.stream, r.type, r.data]);

const jobCount = async (db: Db) =>
  Number((await sql<{ n: string }>`select count(*)::text as n from commitfeed.jobs`.execute(db)).rows[0].n);

t.test('one call: results in input order, key dedup, one wake-up per queue', async (t) => {
  const { db } = await setup(t);
  const [held] = await enqueueJobs(db, [job('q1', { payload: 'held', key: 'k0' })]);
  await sql`truncate commitfeed.feed`.execute(db);

  const res = await enqueueJobs(db, [
    job('q1', { payload: 'a' }),
    job('q1', { payload: 'b', key: 'k1' }),
    job('q1', { payload: 'b again', key: 'k1' }), // repeated within the call
    job('q2', { payload: 'c', key: 'k1' }), // the same key in another queue is another job
    job('q1', { payload: 'd', key: 'k0' }), // held by a job not yet completed
    job('q2', { payload: 'e' }),
    job('q3', { payload: 'f', key: 'k0' }),
  ]);
  t.same(
    res.map((r) => [r.queue, r.duplicate]),
    [
      ['q1', false],
      ['q1', false],
      ['q1', true],
      ['q2', false],
      ['q1', true],
      ['q2', false],
      ['q3', false],
    ],
    'one result per job, in order',
  );
  t.equal(res[2].id, res[1].id, 'a key repeated in the call: the first copy’s job');
  t.equal(res[4].id, held.id, 'a key already held: that job');
  const fresh = [0, 1, 3, 5, 6].map((i) => BigInt(res[i].id));
  t.ok(
    fresh.every((id, i) => i === 0 || id > fresh[i - 1]),
    `new jobs take ids in input order (${fresh.join(', ')})`,
  );
  t.equal(await jobCount(db), 6, 'the held job and five new ones');
  const { rows } = await sql<{ id: string; payload: string }>`
    select id::text as id, payload::text as payload from commitfeed.jobs order by id`.execute(db);
  t.same(
    rows.map((r) => r.payload),
    ['"held"', '"a"', '"b"', '"c"', '"e"', '"f"'],
    'payloads stored as given, duplicates not stored',
  );
  t.same(
    await wakeRows(db),
    [
      ['queue/q1', 'enqueued', '{"jobs":2}'],
      ['queue/q2', 'enqueued', '{"jobs":2}'],
      ['queue/q3', 'enqueued', '{"jobs":1}'],
    ],
    'one wake-up row per queue, counting its new jobs, in order of each queue’s first new job',
  );
  t.same(
    (await sql<{ name: string }>`select name from commitfeed.queues order by name`.execute(db)).rows.map(
      (r) => r.name,
    ),
    ['q1', 'q2', 'q3'],
    'queue rows created',
  );

  t.same(await enqueueJobs(db, []), [], 'an empty call does nothing');
});

t.test('only duplicates: nothing written, no wake-up; an ack frees the key', async (t) => {
  const { db } = await setup(t);
  const [first] = await enqueueJobs(db, [job('q', { payload: 1, key: 'k' })]);
  await sql`truncate commitfeed.feed`.execute(db);
  const again = await enqueueJobs(db, [
    job('q', { payload: 2, key: 'k' }),
    job('q', { payload: 3, key: 'k' }),
  ]);
  t.same(
    again.map((r) => [r.id, r.duplicate]),
    [
      [first.id, true],
      [first.id, true],
    ],
  );
  t.same(await wakeRows(db), [], 'no wake-up row (and so no notify)');
  t.equal(await jobCount(db), 1);

  // What an ack does to the row: the key is free again.
  await sql`delete from commitfeed.jobs where id = ${first.id}::int8`.execute(db);
  const [next] = await enqueueJobs(db, [job('q', { payload: 4, key: 'k' })]);
  t.equal(next.duplicate, false, 'a completed job’s key can be used again');
  t.not(next.id, first.id);
});

t.test('a concurrent transaction holding the key: wait, then its outcome decides', async (t) => {
  const { url, db } = await setup(t);
  const other = await pgClient(t, url);
  const ENQUEUE = `select commitfeed.enqueue('q', '1', key => $1)::text as id`;

  // It commits: this call reports its job.
  await other.query('BEGIN');
  const held = (await other.query<{ id: string }>(ENQUEUE, ['raced'])).rows[0].id;
  let settled = false;
  const mine = enqueueJobs(db, [job('q', { payload: 2, key: 'raced' })]).finally(() => {
    settled = true;
  });
  await new Promise((r) => setTimeout(r, 300));
  t.notOk(settled, 'waits while the other transaction may still commit the key');
  await other.query('COMMIT');
  const [r1] = await mine;
  t.same([r1.id, r1.duplicate], [held, true], 'its job, as a duplicate');

  // It rolls back: this call inserts.
  await other.query('BEGIN');
  await other.query(ENQUEUE, ['rolled']);
  const mine2 = enqueueJobs(db, [job('q', { payload: 3, key: 'rolled' })]);
  await new Promise((r) => setTimeout(r, 300));
  await other.query('ROLLBACK');
  const [r2] = await mine2;
  t.equal(r2.duplicate, false, 'the key was never taken: a new job');
  t.equal(await jobCount(db), 2);
});

t.test('bad input in a batch: the job is named, nothing is written', async (t) => {
  const { url, db } = await setup(t);
  const app = await pgClient(t, url);
  const call = `select * from commitfeed.enqueue_jobs($1::text[], $2::json[], $3::int4[], $4::float8[],
    $5::timestamptz[], $6::text[], $7::int4[], $8::jsonb[])`;
  const B = '{"type":"fixed","delay":1,"max":1,"jitter":false}';
  const cases: [string, unknown[], RegExp][] = [
    [
      'a bad queue name',
      [
        ['q', 'bad name'],
        ['1', '2'],
        [0, 0],
        [0, 0],
        [null, null],
        [null, null],
        [5, 5],
        [B, B],
      ],
      /^queue name must be .* \(got "bad name"\) \(job 2 of 2\)$/,
    ],
    [
      'max attempts out of range',
      [
        ['q', 'q'],
        ['1', '2'],
        [0, 0],
        [0, 0],
        [null, null],
        [null, null],
        [0, 5],
        [B, B],
      ],
      /^max_attempts must be an integer from 1 to 1000 \(job 1 of 2\)$/,
    ],
    [
      'delay and run_at both',
      [['q'], ['1'], [0], [5], ['2030-01-01T00:00:00Z'], [null], [5], [B]],
      /^give either delay_seconds or run_at, not both$/,
    ],
    [
      'a backoff that is not an object',
      [['q'], ['1'], [0], [0], [null], [null], [5], ['[]']],
      /^backoff must be an object$/,
    ],
    [
      'arrays of different lengths',
      [['q', 'q'], ['1'], [0, 0], [0, 0], [null, null], [null, null], [5, 5], [B, B]],
      /must be an array of the same length$/,
    ],
  ];
  for (const [what, params, message] of cases) {
    await t.rejects(app.query(call, params), { code: '22023', message }, what);
  }
  t.equal(await jobCount(db), 0, 'no job row');
  t.same(await wakeRows(db), [], 'no feed row');
});
