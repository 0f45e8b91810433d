// Commits handed on from memory (src/feed/cleared.ts): a group commit's events go to subscribers as
// it commits, without a tail read, only when its statement showed that nothing stands before its
// rows that the tailer lacks. Checked: commitfeed.tail_clear's answers (a lower transaction still
// open, another's committed rows past the tailer, held transactions, the cap); the tailer handing
// on a commit that waited for this process's own lower statement, in order and with no read; a row
// committed elsewhere and not yet read coming first; concurrent publishes beside SQL publishes,
// delivered once each in table order; and a prepared (two-phase) transaction below later commits.
import { sql } from 'kysely';
import t from 'tap';
import { createDatabase } from '../src/db/database.ts';
import type { ClearProbe } from '../src/feed/cleared.ts';
import { START } from '../src/feed/cursor.ts';
import type { CheckedEventInput, FeedEvent } from '../src/feed/event.ts';
import { OwnWrites } from '../src/feed/own-writes.ts';
import { appendCheckedEvents } from '../src/feed/queries/append-checked.ts';
import { readTail } from '../src/feed/queries/read-tail.ts';
import { Tailer } from '../src/feed/tailer.ts';
import { feedRows, openSse, pgClient, publish, startTestServer, testDatabase, until } from './helpers.ts';

const log = { warn() {}, error() {}, info() {} };
const ev = (stream: string, n: number) =>
  ({ stream, type: null, key: null, data: JSON.stringify({ n }) }) as CheckedEventInput;
type Client = Awaited<ReturnType<typeof pgClient>>;
/** The tailer hands commits on in the turn after `committed` (their publishers are answered first). */
const nextTurn = () => new Promise<void>((r) => setImmediate(r));

/** tail_clear's answer for a new transaction of `c` (rolled back after): null, or the ids it names. */
async function ask(c: Client, after: [string, number], own: string[] = []) {
  await c.query('begin');
  try {
    const { rows } = await c.query<{ tx: string }>('select pg_current_xact_id()::text as tx');
    const tx = rows[0].tx;
    const answer = await c.query<{ needs: string | null }>(
      `select array_to_string(commitfeed.tail_clear($1::xid8, $2::xid8, $3::int8, $4::xid8[],
         '-infinity', '0 ms'), ',') as needs`,
      [tx, after[0], after[1], own],
    );
    const needs = answer.rows[0].needs;
    return {
      tx: Number(tx),
      needs: needs === null ? null : needs === '' ? [] : needs.split(',').map(Number),
    };
  } finally {
    await c.query('rollback');
  }
}

/** Publishes one event through SQL in a transaction of its own; its transaction id. */
async function sqlPublish(c: Client, stream: string, n: number): Promise<number> {
  await c.query('begin');
  const { rows } = await c.query<{ tx: string }>('select pg_current_xact_id()::text as tx');
  await c.query('select commitfeed.publish($1, $2::jsonb)', [stream, JSON.stringify({ n })]);
  await c.query('commit');
  return Number(rows[0].tx);
}

t.test('tail_clear names the transactions that stand before a statement', async (t) => {
  const url = await testDatabase(t);
  const asker = await pgClient(t, url);
  const other = await pgClient(t, url);

  // Another transaction with a lower id, still open: named until it ends.
  await other.query('begin');
  const open = Number(
    (await other.query<{ tx: string }>('select pg_current_xact_id()::text as tx')).rows[0].tx,
  );
  const whileOpen = await ask(asker, ['0', 0]);
  t.ok(whileOpen.needs?.includes(open), `a lower transaction still open is named (${whileOpen.needs})`);
  await other.query('commit');
  const afterEnd = await ask(asker, ['0', 0]);
  t.notOk(afterEnd.needs?.includes(open), 'once it ended without rows, it is not');

  // Another transaction's committed row past the position: named, unless held or behind the position.
  const wrote = await sqlPublish(other, 's', 1);
  t.ok(
    (await ask(asker, ['0', 0])).needs?.includes(wrote),
    'a finished transaction with a row past the position is named',
  );
  t.notOk((await ask(asker, ['0', 0], [String(wrote)])).needs?.includes(wrote), 'not when it is held');
  const last = Number(
    (await other.query<{ id: string }>('select max(id)::text as id from commitfeed.feed')).rows[0].id,
  );
  t.notOk(
    (await ask(asker, [String(wrote), last])).needs?.includes(wrote),
    'not when its rows are behind the position',
  );

  // Many of them: no answer (the tailer reads instead); each costs one index probe, whatever its size.
  for (let i = 0; i < 33; i++) await sqlPublish(other, 's', i + 2);
  t.equal(
    (await ask(asker, [String(wrote), last])).needs,
    null,
    'more than 32 transactions to look at: null',
  );

  // Retention trimmed past the position: no answer (a read must see the trim mark).
  const lastNow = Number(
    (await other.query<{ id: string }>('select max(id)::text as id from commitfeed.feed')).rows[0].id,
  );
  const at: [string, number] = [String(wrote + 1000), lastNow];
  // (Other sessions' transactions running at the moment may be named: only the answer's presence counts.)
  t.ok(Array.isArray((await ask(asker, at)).needs), 'an answer for a position beyond every row');
  await other.query(`update commitfeed.trim_mark set txid = $1::xid8, id = $2`, [
    String(wrote + 1000),
    lastNow + 1,
  ]);
  t.equal((await ask(asker, at)).needs, null, 'a trim mark past the position: null');
});

/** A tailer on a fresh test database whose hub is `onEvents`; someone waits (idle false), and no timer
 * reads during the test. `held`: what own-writes keeps. */
async function startTailer(
  t: { teardown(fn: () => unknown): void },
  held: number,
  onEvents: (e: readonly FeedEvent[]) => void,
) {
  const { db } = createDatabase({ url: await testDatabase(t), poolSize: 4, statementTimeoutMs: 5000, log });
  t.teardown(() => db.destroy());
  const own = new OwnWrites(held);
  const tailer = new Tailer(db, {
    pageSize: 100,
    windowEvents: 1000,
    pollIntervalMs: 600_000,
    log,
    own,
    idle: () => false,
    onEvents,
  });
  await tailer.start();
  t.teardown(() => tailer.stop());
  /** One group commit as the feed's batcher makes it: the tailer's question asked, the answer handed back. */
  const commit = async (events: CheckedEventInput[]) => {
    const probe = tailer.clearProbe()!;
    await appendCheckedEvents(db, events, own, probe);
    tailer.committed(probe, false);
    return probe;
  };
  return { db, own, tailer, commit };
}

t.test(
  'events own-writes did not keep are read, never handed on; a failing subscriber fails no commit',
  async (t) => {
    const got: FeedEvent[] = [];
    let failNext = false;
    const { tailer, commit } = await startTailer(t, 2, (e) => {
      if (failNext) {
        failNext = false;
        throw new Error('a subscriber failed');
      }
      got.push(...e);
    });

    // Three events: more than own-writes keeps, so no answer, and a read brings them.
    const big = await commit([ev('k', 1), ev('k', 2), ev('k', 3)]);
    t.equal(big.answer, undefined, 'no answer for events that were not kept');
    await tailer.settled(5000);
    await until(() => got.length === 3, 10_000, 'the read to bring the three events');
    t.equal(tailer.cleared.handedOn, 0, 'nothing handed on');

    // The hub throws while a commit is handed on: logged (the hand-on runs in a turn of its own, after
    // the commit's publishers are answered), and the next commit goes on.
    let handed = false;
    for (let attempt = 1; attempt <= 10 && !handed; attempt++) {
      const before = tailer.cleared.handedOn;
      failNext = true;
      await commit([ev('k', 10 + attempt)]);
      await nextTurn();
      handed = tailer.cleared.handedOn > before;
      failNext = false;
      await tailer.settled(5000);
    }
    t.ok(handed, 'a commit was handed on while the hub threw');
    await commit([ev('k', 99)]);
    await tailer.settled(5000);
    await until(() => got.some((e) => JSON.parse(e.data).n === 99), 10_000, 'the next commit to arrive');
    t.pass('later commits still arrive');
  },
);

t.test(
  'a commit waiting for a lower statement of this process is handed on with it, in order, without a read',
  async (t) => {
    const got: FeedEvent[] = [];
    const { db, own, tailer } = await startTailer(t, 1000, (e) => got.push(...e));

    // Another session's transaction running at the second statement's snapshot would be named too and
    // make that attempt read instead; the attempts go on until one shows the hand-on alone.
    let shown = false;
    for (let attempt = 1; attempt <= 10 && !shown; attempt++) {
      const reads = tailer.stats.reads;
      const handed = tailer.cleared.handedOn;
      const from = got.length;
      // The first statement takes the lower id and commits last, as the group commit's two statements in
      // flight can; it records its events when it commits, as the group commit does.
      const first = tailer.clearProbe()!;
      let go!: () => void;
      const mayAppend = new Promise<void>((r) => (go = r));
      let started!: (tx: number) => void;
      const hasId = new Promise<number>((r) => (started = r));
      const scratch = new OwnWrites(10);
      const firstDone = db.transaction().execute(async (trx) => {
        const { rows } = await sql<{ tx: string }>`select pg_current_xact_id()::text as tx`.execute(trx);
        started(Number(rows[0].tx));
        await mayAppend;
        await appendCheckedEvents(trx, [ev('w', 2 * attempt)], scratch, first);
      });
      const firstTx = await hasId;
      const second: ClearProbe = tailer.clearProbe()!;
      await appendCheckedEvents(db, [ev('w', 2 * attempt + 1)], own, second);
      tailer.committed(second, true);
      await nextTurn();
      const alone = second.answer !== undefined && second.answer.needs.join() === String(firstTx);
      if (alone) {
        t.equal(got.length, from, `attempt ${attempt}: the second statement waits for the first`);
        t.equal(tailer.cleared.size, 1, 'its answer is kept');
      }
      go();
      await firstDone;
      // Recorded only now, as the group commit records a statement once it has committed.
      const [held] = scratch.between([String(firstTx)], START, { txid: Number.MAX_SAFE_INTEGER, id: 0 });
      own.record(String(firstTx), [held.id], [ev('w', 2 * attempt)], held.ms);
      tailer.committed(first, false);
      t.equal(got.length, from, 'handed on in the next turn, not within committed()');
      await nextTurn();
      if (alone && first.answer !== undefined && first.answer.needs.length === 0) {
        t.same(
          got.slice(from).map((e) => JSON.parse(e.data).n),
          [2 * attempt, 2 * attempt + 1],
          'both handed on, the lower transaction first',
        );
        t.equal(tailer.stats.reads, reads, 'without a read');
        t.equal(tailer.cleared.handedOn - handed, 2, 'both counted as handed on');
        shown = true;
      } else {
        t.comment(`attempt ${attempt}: another session's transaction was named; read instead`);
        await tailer.settled(5000);
        await until(() => got.length === from + 2, 10_000, 'the attempt to be read');
      }
    }
    t.ok(shown, 'the hand-on was seen within 10 attempts');
    // What went to the hub is the table, whole and in order.
    const table = (await readTail(db, START, 1000, undefined, undefined, tailer.history.suffix)).events;
    const shape = (e: FeedEvent) => [e.txid, e.id, e.cursor, e.stream, e.type, e.key, e.data, e.ms];
    t.same(got.map(shape), table.map(shape), 'the hub got the table, once, in feed order');
  },
);

t.test(
  'a row committed elsewhere and not yet read is delivered before a commit of this process',
  async (t) => {
    const url = await testDatabase(t);
    const server = await startTestServer(t, url);
    const sse = await openSse(t, `${server.url}/v1/streams/c/events`);
    const other = await pgClient(t, url);
    // Without the LISTEN connection, the other session's commit wakes nobody here.
    await server.feed.listener.stop();
    for (let i = 0; i < 3; i++) {
      await sqlPublish(other, 'c', 2 * i);
      const res = await publish(server.url, 'c', { data: { n: 2 * i + 1 } });
      t.equal(res.status, 201);
    }
    const frames = await sse.waitFor(6, 10_000);
    t.same(
      frames.map((f) => JSON.parse(f.data!).n),
      [0, 1, 2, 3, 4, 5],
      'each in commit order, once',
    );
    t.same(
      frames.map((f) => f.id),
      (await feedRows(server.feed.db)).map((r) => r.cursor),
      'the SSE order is the table order',
    );
  },
);

t.test(
  'concurrent publishes beside SQL publishes: each delivered once, in table order, most handed on',
  async (t) => {
    const url = await testDatabase(t);
    const server = await startTestServer(t, url);
    const sse = await openSse(t, `${server.url}/v1/streams/m/events`);
    const other = await pgClient(t, url);
    const viaSql = (async () => {
      for (let i = 0; i < 10; i++) await sqlPublish(other, 'm', 1000 + i);
    })();
    const answers = await Promise.all(
      Array.from({ length: 150 }, (_, i) => publish(server.url, 'm', { data: { n: i } })),
    );
    await viaSql;
    t.ok(
      answers.every((r) => r.status === 201),
      'every publish is accepted',
    );
    const frames = await sse.waitFor(160, 20_000);
    const rows = await feedRows(server.feed.db);
    t.equal(rows.length, 160, 'the table holds every event');
    t.same(
      frames.map((f) => f.id),
      rows.map((r) => r.cursor),
      'each delivered once, in table order',
    );
    t.ok(
      server.feed.tailer.cleared.handedOn > 0,
      `commits handed on from memory: ${server.feed.tailer.cleared.handedOn}`,
    );
  },
);

t.test(
  'a prepared (two-phase) transaction holds delivery back until it is committed or rolled back; nothing is lost or repeated',
  async (t) => {
    const url = await testDatabase(t);
    const other = await pgClient(t, url);
    const { rows: setting } = await other.query<{ n: number }>(
      "select current_setting('max_prepared_transactions')::int as n",
    );
    if (setting[0].n === 0) {
      // npm test's embedded cluster allows it (test/run.ts); a shared server may not.
      t.plan(0, 'skipped: max_prepared_transactions is 0 on this server');
      return;
    }
    const server = await startTestServer(t, url);
    const sse = await openSse(t, `${server.url}/v1/streams/p/events`);
    const tailer = server.feed.tailer;
    const gids = [`cf_cleared_${process.pid}_a`, `cf_cleared_${process.pid}_b`];
    // A prepared transaction outlives its session and holds back every feed of the cluster: never left behind.
    t.teardown(async () => {
      for (const gid of gids) {
        const { rowCount } = await other.query('select 1 from pg_prepared_xacts where gid = $1', [gid]);
        if (rowCount) await other.query(`rollback prepared '${gid}'`);
      }
    });
    // PostgreSQL refuses to prepare a transaction that notified: the publisher turns the wake-up off.
    const prepare = async (gid: string, n: number, wakeUp = false) => {
      await other.query('begin');
      if (!wakeUp) await other.query('set local commitfeed.notify = off');
      await other.query('select commitfeed.publish($1, $2::jsonb)', ['p', JSON.stringify({ n })]);
      await other.query(`prepare transaction '${gid}'`);
    };
    await t.rejects(prepare(gids[0], -1, true), { code: '0A000' }, 'with the wake-up on, PREPARE is refused');
    await other.query('rollback');
    const published = async (from: number, count: number) => {
      for (let n = from; n < from + count; n++) {
        t.equal((await publish(server.url, 'p', { data: { n } })).status, 201, `publish ${n} answered`);
      }
    };

    await prepare(gids[0], 0);
    const handed = tailer.cleared.handedOn;
    const reads = tailer.stats.reads;
    await published(1, 3);
    // A read after the three commits has ended, and still nothing has gone out past the prepared one.
    await until(() => tailer.stats.reads > reads, 10_000, 'the tailer to read after the commits');
    await tailer.settled(2000);
    t.equal(sse.received.length, 0, 'nothing delivered while a lower transaction is prepared');
    t.equal(tailer.cleared.handedOn, handed, 'no commit handed on past it');

    await other.query(`commit prepared '${gids[0]}'`);
    const frames = await sse.waitFor(4, 10_000);
    t.same(
      frames.map((f) => JSON.parse(f.data!).n),
      [0, 1, 2, 3],
      'once committed, its event first, then the later commits',
    );

    // Rolled back instead: the later commits go out, and its event never does.
    await prepare(gids[1], 100);
    await published(4, 2);
    await other.query(`rollback prepared '${gids[1]}'`);
    const after = await sse.waitFor(6, 10_000);
    t.same(
      after.map((f) => JSON.parse(f.data!).n),
      [0, 1, 2, 3, 4, 5],
      'after a rollback, the later commits only',
    );
    await tailer.settled(2000);
    t.same(
      sse.received.map((f) => f.id),
      (await feedRows(server.feed.db)).map((r) => r.cursor),
      'the SSE order is the table order, each event once',
    );
  },
);
