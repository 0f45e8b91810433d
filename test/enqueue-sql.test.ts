// commitfeed.enqueue (SQL) inside the application's own transaction. Both it and the service's
// enqueueJobs call commitfeed.enqueue_jobs; what commitfeed.enqueue restates (its defaults and the
// backoff normalisation of toJobInput) must give the same rows. Woken at COMMIT (and never by a
// ROLLBACK), bad input refused with nothing written.
import { sql } from 'kysely';
import t from 'tap';
import { enqueueJobs } from '../src/queues/enqueue.ts';
import { type JobBody, toJobInput } from '../src/queues/validate.ts';
import { feedRows, pgClient, sleep, sqlClient, startTestServer, testDatabase } from './helpers.ts';
import { claim, jobRows, timed } from './queue-helpers.ts';

const ENQUEUE = 'select commitfeed.enqueue($1, $2::jsonb, $3, $4, $5, $6, $7, $8::jsonb)::text as id';

/** A job body as commitfeed.enqueue's arguments (the SQL defaults where the body has nothing). */
const sqlArgs = (queue: string, b: JobBody) => [
  queue,
  JSON.stringify(b.payload),
  b.delay ?? 0,
  b.priority ?? 0,
  b.key ?? null,
  b.maxAttempts ?? 5,
  b.runAt ?? null,
  b.backoff === undefined ? null : JSON.stringify(b.backoff),
];

const CASES: [string, JobBody][] = [
  ['emails', { payload: { to: 'a@example.com', n: [1, 2] } }],
  ['emails', { payload: 'two', priority: -7, maxAttempts: 1 }],
  ['emails', { payload: null, delay: 30 }],
  ['emails', { payload: 3, delay: 2.5, key: 'k-1' }],
  ['emails', { payload: 'dup of k-1', key: 'k-1', priority: 9 }], // duplicate: the k-1 job's id
  ['other.q:1', { payload: [true], key: 'k-1' }], // the same key in another queue is another job
  ['other.q:1', { payload: 1, runAt: '2031-05-06T07:08:09.123Z' }],
  ['other.q:1', { payload: 2, runAt: '2001-01-01T00:00:00Z', key: 'past' }],
  ['b', { payload: {}, backoff: { type: 'fixed' } }],
  ['b', { payload: {}, backoff: { delay: 0.5, max: 60, jitter: false, extra: 1 } as JobBody['backoff'] }],
  ['b', { payload: {}, backoff: { type: 'exponential', delay: 1, max: 3600, jitter: true } }],
  ['b', { payload: {}, key: '😀'.repeat(100), maxAttempts: 1000, priority: 1_000_000 }],
];

async function state(db: ReturnType<typeof sqlClient>) {
  const jobs = await sql<Record<string, unknown>>`
    select id, queue, payload::jsonb::text as payload, priority, state, attempt, max_attempts,
           backoff::text as backoff, key, lease, lease_expires_at, last_error, dead_at,
           -- An explicit run_at exactly; a delay as seconds after created_at.
           case when run_at < created_at - interval '1 day' or run_at > created_at + interval '1 day' then run_at::text
                else round(extract(epoch from run_at - created_at)::numeric, 1)::text end as run_at
    from commitfeed.jobs order by id`.execute(db);
  const queues = await sql`select name, paused, completed from commitfeed.queues order by name`.execute(db);
  // Feed ids are left out: the server's start-up may take a value of the sequence.
  const feed = await sql<{
    stream: string;
    type: string;
    data: string;
  }>`select stream, type, key, data::text from commitfeed.feed order by id`.execute(db);
  return { jobs: jobs.rows, queues: queues.rows, feed: feed.rows };
}

t.test(
  'commitfeed.enqueue writes the same rows as enqueueJobs, key dedup, defaults and backoff included',
  async (t) => {
    const url = await testDatabase(t);
    await startTestServer(t, url); // migrates
    const db = sqlClient(t, url);
    const app = await pgClient(t, url);

    const tsIds: string[] = [];
    for (const [queue, body] of CASES) {
      const [r] = await enqueueJobs(db, [toJobInput(queue, body, 1 << 20)]);
      tsIds.push(r.id);
    }
    const viaTs = await state(db);
    await sql`truncate commitfeed.feed, commitfeed.feed_keys, commitfeed.jobs, commitfeed.queues restart identity`.execute(
      db,
    );
    const sqlIds: string[] = [];
    for (const [queue, body] of CASES) {
      const { rows } = await app.query<{ id: string }>(ENQUEUE, sqlArgs(queue, body));
      sqlIds.push(rows[0].id);
    }
    const viaSql = await state(db);

    t.same(sqlIds, tsIds, 'the same ids returned (a duplicate key: the existing job)');
    t.equal(sqlIds[4], sqlIds[3], 'a key already held returns the original job');
    t.equal(viaSql.jobs.length, CASES.length - 1, 'the duplicate wrote no job');
    t.same(viaSql.jobs, viaTs.jobs, 'the same job rows');
    t.same(viaSql.queues, viaTs.queues, 'the same queue rows');
    t.same(viaSql.feed, viaTs.feed, 'the same wake-up rows');
    t.same(
      viaSql.feed.map((r) => [r.stream, r.type, r.data]),
      Array.from({ length: CASES.length - 1 }, (_, i) => [
        `queue/${CASES[i < 4 ? i : i + 1][0]}`,
        'enqueued',
        '{"jobs":1}',
      ]),
      'one wake-up per inserted job',
    );
    t.match(viaSql.jobs[0], {
      priority: 0,
      state: 'ready',
      attempt: 0,
      max_attempts: 5,
      backoff: '{"max": 3600, "type": "exponential", "delay": 1, "jitter": true}',
      key: null,
      run_at: '0.0',
    });

    // A NULL or JSON-null backoff is the default; 1.0 is stored as 1, as JSON.stringify writes it.
    const backoffOf = async (backoff: string | null) => {
      const { rows } = await app.query<{ id: string }>(
        `select commitfeed.enqueue('b', '1', backoff => $1::jsonb) as id`,
        [backoff],
      );
      return (await app.query(`select backoff::text from commitfeed.jobs where id = $1`, [rows[0].id]))
        .rows[0].backoff;
    };
    const DEFAULT = '{"max": 3600, "type": "exponential", "delay": 1, "jitter": true}';
    t.equal(
      await backoffOf('{"delay": 1.0, "max": 1e2}'),
      '{"max": 100, "type": "exponential", "delay": 1, "jitter": true}',
    );
    t.equal(await backoffOf(null), DEFAULT);
    t.equal(await backoffOf('null'), DEFAULT);
  },
);

const wakes = (s: Awaited<ReturnType<typeof startTestServer>>) => s.feed.listener.stats.notifications;

t.test('in the application transaction: a waiting claim wakes at COMMIT, never for a ROLLBACK', async (t) => {
  const url = await testDatabase(t);
  // A fallback poll of ten minutes: only the NOTIFY at commit can wake the claim in time.
  const server = await startTestServer(t, url, { pollIntervalMs: 600_000 });
  const db = sqlClient(t, url);
  const app = await pgClient(t, url);
  await app.query('create table orders (id int primary key)');
  await sleep(50); // let start-up reads settle

  // Rolled back: nothing is created, nobody wakes, the claim runs out its wait empty.
  const start = Date.now();
  const before = wakes(server);
  const waitingEmpty = timed(claim(server.url, 'q', { wait: 1.5 }));
  await sleep(100);
  await app.query('BEGIN');
  await app.query('insert into orders values (1)');
  await app.query(`select commitfeed.enqueue('q', '{"order": 1}')`);
  await app.query('ROLLBACK');
  const empty = await waitingEmpty;
  t.same(empty.value, [], 'a rolled-back enqueue hands out nothing');
  t.ok(empty.at - start >= 1400, `the claim waited out its time (${empty.at - start} ms)`);
  t.equal(wakes(server), before, 'no notification');
  t.same(await jobRows(db), [], 'no job row');
  t.same(await feedRows(db), [], 'no feed row');
  t.same((await sql`select * from commitfeed.queues`.execute(db)).rows, [], 'no queue row');

  // Committed: the claim returns at the commit, not before.
  for (let i = 0; i < 5; i++) {
    const waiting = timed(claim(server.url, 'q', { wait: 20 }));
    await sleep(100);
    await app.query('BEGIN');
    await app.query('insert into orders values ($1)', [i + 10]);
    const { rows } = await app.query<{ id: string }>(
      `select commitfeed.enqueue('q', jsonb_build_object('order', $1::int), key => 'order-' || $1)::text as id`,
      [i + 10],
    );
    await sleep(400);
    t.notOk(waiting.settled(), `run ${i}: not handed out before the commit`);
    await app.query('COMMIT');
    const committedAt = Date.now();
    const got = await waiting;
    t.same(
      got.value.map((j) => [j.id, j.payload]),
      [[rows[0].id, { order: i + 10 }]],
      `run ${i}: the job`,
    );
    t.ok(got.at - committedAt < 2000, `run ${i}: woken at the commit (${got.at - committedAt} ms after)`);
  }
});

t.test('bad input raises a clear error (SQLSTATE 22023) and writes nothing', async (t) => {
  const url = await testDatabase(t);
  await startTestServer(t, url);
  const db = sqlClient(t, url);
  const app = await pgClient(t, url);
  const bad: [string, JobBody, RegExp, unknown[]?][] = [
    ['bad name', { payload: 1 }, /^queue name must be 1-200 characters .* \(got "bad name"\)$/],
    ['queue/x', { payload: 1 }, /^queue name must be/],
    ['q', { payload: 1, maxAttempts: 0 }, /^max_attempts must be an integer from 1 to 1000$/],
    ['q', { payload: 1, maxAttempts: 1001 }, /^max_attempts must be/],
    ['q', { payload: 1, delay: -1 }, /^delay_seconds must be a number of seconds from 0 to 31536000$/],
    ['q', { payload: 1, delay: 31536001 }, /^delay_seconds must be/],
    ['q', { payload: 1, priority: 1_000_001 }, /^priority must be an integer from -1000000 to 1000000$/],
    ['q', { payload: 1, key: '' }, /^key must be a string of 1-200 characters/],
    ['q', { payload: 1, key: '😀'.repeat(201) }, /^key must be a string of 1-200 characters/],
    [
      'q',
      { payload: 1, backoff: { type: 'linear' } as never },
      /^backoff.type must be "exponential" or "fixed"$/,
    ],
    ['q', { payload: 1, backoff: { delay: -1 } }, /^backoff.delay must be a number of seconds from 0 to/],
    ['q', { payload: 1, backoff: { max: '5' } as never }, /^backoff.max must be a number of seconds/],
    ['q', { payload: 1, backoff: { jitter: 1 } as never }, /^backoff.jitter must be a boolean$/],
    ['q', { payload: 1, backoff: [] as never }, /^backoff must be an object$/],
    [
      'q',
      { payload: 1, delay: 5, runAt: '2030-01-01T00:00:00Z' },
      /^give either delay_seconds or run_at, not both$/,
    ],
  ];
  for (const [queue, body, message] of bad) {
    t.throws(() => toJobInput(queue, body, 1 << 20), `TypeScript refuses it too: ${message}`);
    await t.rejects(app.query(ENQUEUE, sqlArgs(queue, body)), { code: '22023', message }, String(message));
  }
  const raw: [string, unknown[], RegExp][] = [
    ['select commitfeed.enqueue(null, $1)', ['1'], /^queue name must be .* \(got null\)$/],
    ["select commitfeed.enqueue('q', null)", [], /^payload must not be SQL NULL/],
    ["select commitfeed.enqueue('q', '1', 'NaN')", [], /^delay_seconds must be/],
    ["select commitfeed.enqueue('q', '1', run_at => 'infinity')", [], /^run_at must be a finite timestamp$/],
  ];
  for (const [text, params, message] of raw) {
    await t.rejects(app.query(text, params), { code: '22023', message }, text);
  }
  // Inside a transaction, the error aborts it: nothing of it commits.
  await app.query('BEGIN');
  await app.query(`select commitfeed.enqueue('q', '1')`);
  await t.rejects(app.query(`select commitfeed.enqueue('q', '1', max_attempts => 0)`), { code: '22023' });
  await app.query('COMMIT'); // rolls back
  t.same(await jobRows(db), [], 'no job row');
  t.same(await feedRows(db), [], 'no feed row');
  t.same((await sql`select * from commitfeed.queues`.execute(db)).rows, [], 'no queue row');
});
