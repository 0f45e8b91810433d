// A cursor has one form wherever it is read: `<txid>-<id>.<tag>`. The service tags the group commit's
// cursors in JavaScript (src/feed/history.ts: epochTag of the feed's epoch); the SQL functions that
// answer with cursors tag them in PostgreSQL (commitfeed.cursor_suffix, src/sql/cursor-suffix.sql).
// Both must derive the same tag from the same epoch, and every way of writing must answer alike.
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import t from 'tap';
import { epochTag, parseCursor, tagSuffix } from '../src/feed/cursor.ts';
import { readFeedEpoch } from '../src/feed/queries/feed-epoch.ts';
import { publish as publishInTx } from '../src/index.ts';
import {
  CURSOR_TEXT,
  feedRows,
  openSse,
  publish,
  sqlClient,
  startTestServer,
  testDatabase,
  until,
} from './helpers.ts';
import { api } from './queue-helpers.ts';

t.test('PostgreSQL derives the same tag from an epoch as epochTag()', async (t) => {
  const db = sqlClient(t, await testDatabase(t));
  const epochs = [
    '00000000-0000-0000-0000-000000000000',
    'ffffffff-ffff-ffff-ffff-ffffffffffff',
    'ABCDEF01-2345-6789-abcd-ef0123456789',
    ...Array.from({ length: 20 }, () => randomUUID()),
  ];
  for (const epoch of epochs) {
    await sql`update commitfeed.feed_epoch set epoch = ${epoch}::uuid`.execute(db);
    const { rows } = await sql<{ suffix: string }>`select commitfeed.cursor_suffix() as suffix`.execute(db);
    // From the stored epoch, as the service reads it at start-up.
    t.equal(rows[0].suffix, tagSuffix(epochTag(await readFeedEpoch(db))), epoch);
  }
});

t.test('every way of writing answers with the tagged cursor SSE gives', async (t) => {
  const url = await testDatabase(t);
  const server = await startTestServer(t, url);
  const db = sqlClient(t, url);
  const tag = server.feed.history.tag;
  const sse = await openSse(t, `${server.url}/v1/streams/s/events`);

  const http = (await publish(server.url, 's', { data: 'http', key: 'k-http' })).body.id;
  const viaSql = (
    await sql<{ id: string }>`select commitfeed.publish('s', '"sql"', null, 'k-sql') as id`.execute(db)
  ).rows[0].id;
  const viaAppend = (
    await sql<{ cursor: string }>`
      select cursor from commitfeed.append(array['s'], array[null], array[null], array['"append"']::json[])`.execute(
      db,
    )
  ).rows[0].cursor;
  const viaLibrary = (await publishInTx(db, 's', 'library')).id;
  // A transaction with an enqueue runs commitfeed.append in the service's own transaction.
  const tx = await api(server.url, 'POST', '/v1/tx', {
    ops: [{ publish: { stream: 's', data: 'tx' } }, { enqueue: { queue: 'q', payload: 1 } }],
  });
  t.equal(tx.status, 200, JSON.stringify(tx.body));
  const viaTx = tx.body.results[0].publish.id as string;

  const ids = [http, viaSql, viaAppend, viaLibrary, viaTx];
  for (const id of ids) {
    t.match(id, CURSOR_TEXT, `${id}: tagged once`);
    t.equal(parseCursor(id)?.tag, tag, `${id}: with this feed's tag`);
  }
  const got = await sse.waitFor(ids.length, 10_000);
  t.same(
    got.map((m) => m.id),
    ids,
    'the ids SSE gives',
  );
  t.same(
    (await feedRows(db)).filter((r) => r.stream === 's').map((r) => r.cursor),
    ids,
    'the rows',
  );
  // A duplicate answers with the original's cursor, in the same form.
  const dup = await sql<{ id: string }>`select commitfeed.publish('s', '2', null, 'k-http') as id`.execute(
    db,
  );
  t.equal(dup.rows[0].id, http, 'a key already used over HTTP: the original, tagged');
});

t.test("the live page's position is a cursor in the same form", async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  await publish(server.url, 's', { data: 1 });
  const sample = await server.sampler.sample();
  t.match(sample?.position, CURSOR_TEXT);
  t.equal(parseCursor(sample!.position)?.tag, server.feed.history.tag);
});

t.test("a stream subscription's jobs carry the event's tagged cursor", async (t) => {
  const url = await testDatabase(t);
  const server = await startTestServer(t, url, { pollIntervalMs: 100 });
  const db = sqlClient(t, url);
  const sub = await api(server.url, 'POST', '/v1/subscriptions', { name: 'a', stream: 's', queue: 'q' });
  t.equal(sub.status, 201, JSON.stringify(sub.body));
  const id = (await publish(server.url, 's', { data: 1 })).body.id;
  let cursor: string | undefined;
  await until(
    async () => {
      const { rows } = await sql<{ c: string }>`
        select payload->>'cursor' as c from commitfeed.jobs where queue = 'q'`.execute(db);
      cursor = rows[0]?.c;
      return cursor !== undefined;
    },
    10_000,
    'the job',
  );
  t.equal(cursor, id, 'the job names the event as its publish did');
});
