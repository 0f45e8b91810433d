// Cursors from another history (docs/streams.md#cursors-from-another-history): a position this feed
// never reached (far in the future, from a database restored or recreated below it) or minted by
// another feed is told so — JSON 409 cursor_not_in_feed, SSE an in-band `reset` — never answered
// with a stream that stays silent forever. Cursors this feed minted, tagged or not, keep working.
import { sql } from 'kysely';
import t from 'tap';
import { CommitfeedClient, type ResetInfo } from '../src/client/index.ts';
import { formatCursor, parseCursor } from '../src/feed/cursor.ts';
import {
  CURSOR_TEXT,
  feedTag,
  openSse,
  publish,
  sqlClient,
  startTestServer,
  testDatabase,
  untagged,
} from './helpers.ts';

const FAR = '9007199254740991-1';

interface JsonPage {
  events: { id: string; data: unknown }[];
  next: string;
  reset?: { reason: string; resumeFrom: string };
}
interface NotInFeedBody {
  statusCode: number;
  code: string;
  message: string;
  reason: string;
  resumeFrom: string;
}

async function getJson(url: string): Promise<{ status: number; body: JsonPage & NotInFeedBody }> {
  const res = await fetch(url);
  return { status: res.status, body: (await res.json()) as JsonPage & NotInFeedBody };
}

/** Publishes `n` events to `stream` one by one; their cursors. */
async function publishN(base: string, stream: string, n: number, from = 0): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const r = await publish(base, stream, { data: { n: from + i } });
    if (r.status !== 201) throw new Error(`publish answered ${r.status}`);
    ids.push(r.body.id);
  }
  return ids;
}

t.test('a far-future cursor: JSON 409, SSE reset then every retained event, globs too', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl);
  const tag = await feedTag(sqlClient(t, dbUrl));
  const ids = await publishN(server.url, 'f.a', 3);
  t.match(ids[0], CURSOR_TEXT, 'publish answers a tagged cursor');
  t.ok(ids[0].endsWith(`.${tag}`), "the tag is this feed's");

  for (const cursor of [FAR, `${FAR}.${tag}`, '1-999999999']) {
    const json = await getJson(`${server.url}/v1/streams/f.a/events?after=${cursor}`);
    t.equal(json.status, 409, `${cursor}: JSON 409`);
    t.match(json.body, { code: 'cursor_not_in_feed', reason: 'ahead', resumeFrom: `0-0.${tag}` });
    t.match(json.body.message, /past everything this feed has committed/);
  }
  // The position it names: every retained event (UNKNOWN_CURSOR_RESUME=earliest).
  const again = await getJson(`${server.url}/v1/streams/f.a/events?after=0-0.${tag}`);
  t.same(
    again.body.events.map((e) => e.id),
    ids,
    'resumeFrom reads every retained event',
  );

  const sse = await openSse(t, `${server.url}/v1/streams/f.a/events`, { 'last-event-id': FAR });
  t.equal(sse.status, 200, 'SSE: 200 (EventSource gives up on anything else)');
  t.equal(sse.primed, FAR, 'primed with the cursor as given (a drop before the reset is told again)');
  const [reset, ...replayed] = await sse.waitFor(4);
  t.same([reset.event, reset.id], ['reset', `0-0.${tag}`], 'a reset first, its id the resume position');
  t.same(JSON.parse(reset.data!), { reason: 'ahead', resumeFrom: `0-0.${tag}` });
  t.same(
    replayed.map((m) => m.id),
    ids,
    'then every retained event',
  );
  const live = await publish(server.url, 'f.a', { data: 'live' });
  t.same((await sse.waitFor(5))[4].id, live.body.id, 'then live events');

  // A glob reads its events through its own selection: the same reset, then its events.
  const glob = await openSse(t, `${server.url}/v1/events?stream=f.*`, { 'last-event-id': `${FAR}/f.a` });
  const [gReset, ...gEvents] = await glob.waitFor(5);
  t.same([gReset.event, JSON.parse(gReset.data!).reason], ['reset', 'ahead'], 'glob: reset first');
  t.same(
    gEvents.map((m) => m.id),
    [...ids, live.body.id].map((id) => `${id}/f.a`),
    'glob: then every retained event',
  );
});

t.test('cursors this feed minted are never ahead, tagged or not, from any instance', async (t) => {
  const dbUrl = await testDatabase(t);
  const a = await startTestServer(t, dbUrl);
  const b = await startTestServer(t, dbUrl);
  const ids = await publishN(a.url, 's', 3);
  // `latest` and an empty page's `next` are horizon cursors: minted on A, read at once on B.
  const latest = await getJson(`${a.url}/v1/streams/s/events`);
  t.match(latest.body.next, CURSOR_TEXT);
  for (const cursor of [latest.body.next, ids[2], untagged(ids[2]), ids[0], untagged(ids[0]), '0-0']) {
    const page = await getJson(`${b.url}/v1/streams/s/events?after=${cursor}`);
    t.equal(page.status, 200, `${cursor}: read on the other instance`);
    t.match(page.body.next, CURSOR_TEXT, 'next is tagged');
  }
  const old = await getJson(`${b.url}/v1/streams/s/events?after=${untagged(ids[0])}`);
  t.same(
    old.body.events.map((e) => e.id),
    ids.slice(1),
    'an untagged cursor of this feed resumes exactly, answered with tagged ids',
  );
  const published = await publish(a.url, 's', { data: 'next' });
  const sse = await openSse(t, `${b.url}/v1/streams/s/events`, { 'last-event-id': untagged(ids[2]) });
  t.equal(sse.primed, ids[2], 'primed with the cursor, tagged');
  t.same((await sse.waitFor(1))[0].id, published.body.id, 'an untagged Last-Event-ID resumes');
});

t.test('a cursor from another database: foreign when tagged, ahead when not', async (t) => {
  const urlA = await testDatabase(t);
  const urlB = await testDatabase(t);
  // Test databases are cloned from one template, so they share its epoch, as a copy of a database
  // would: give B its own, as a database created on its own has.
  await sql`update commitfeed.feed_epoch set epoch = gen_random_uuid()`.execute(sqlClient(t, urlB));
  const a = await startTestServer(t, urlA);
  const b = await startTestServer(t, urlB);
  const tagB = await feedTag(sqlClient(t, urlB));
  const fromA = await publishN(a.url, 's', 5);
  const fromB = await publishN(b.url, 's', 1);
  t.not(parseCursor(fromA[4])!.tag, tagB, 'the two feeds have different tags');

  const foreign = await getJson(`${b.url}/v1/streams/s/events?after=${fromA[0]}`);
  t.equal(foreign.status, 409, 'a tagged cursor of A on B: 409');
  t.match(foreign.body, { code: 'cursor_not_in_feed', reason: 'foreign', resumeFrom: `0-0.${tagB}` });
  t.match(foreign.body.message, /minted by another feed/);
  // Untagged, only its position can tell: A's 5th id was never handed out by B's sequence.
  const ahead = await getJson(`${b.url}/v1/streams/s/events?after=${untagged(fromA[4])}`);
  t.equal(ahead.status, 409, 'an untagged cursor past B: 409');
  t.match(ahead.body, { code: 'cursor_not_in_feed', reason: 'ahead' });

  for (const [cursor, reason] of [
    [fromA[0], 'foreign'],
    [untagged(fromA[4]), 'ahead'],
  ]) {
    const sse = await openSse(t, `${b.url}/v1/streams/s/events`, { 'last-event-id': cursor });
    const [reset, first] = await sse.waitFor(2);
    t.same([reset.event, JSON.parse(reset.data!)], ['reset', { reason, resumeFrom: `0-0.${tagB}` }]);
    t.equal(first.id, fromB[0], `${reason}: then B's events`);
    sse.close();
  }
  // The other readers of a cursor: a queue's activity stream and a stream subscription's `from`.
  const activity = await openSse(t, `${b.url}/v1/queues/q/events`, { 'last-event-id': fromA[0] });
  const [qReset] = await activity.waitFor(1);
  t.same([qReset.event, JSON.parse(qReset.data!).reason], ['reset', 'foreign'], 'queue activity: reset');
  const sub = await fetch(`${b.url}/v1/subscriptions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'x', stream: 's', queue: 'q', from: fromA[0] }),
  });
  t.equal(sub.status, 409, 'a stream subscription from a foreign cursor: 409');
  t.match(await sub.json(), { code: 'cursor_not_in_feed', reason: 'foreign', resumeFrom: `0-0.${tagB}` });
  const ok = await fetch(`${b.url}/v1/subscriptions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'y', stream: 's', queue: 'q', from: fromB[0] }),
  });
  t.equal(ok.status, 201, "from one of B's own cursors: created");
  t.equal(((await ok.json()) as { cursor: string }).cursor, fromB[0], 'its cursor shown tagged');
});

t.test('a database recreated below the client: the old cursor is foreign or ahead', async (t) => {
  const dbUrl = await testDatabase(t);
  let server = await startTestServer(t, dbUrl);
  const before = await publishN(server.url, 's', 4);
  const held = before[3];
  await server.close();
  const db = sqlClient(t, dbUrl);
  await sql`drop schema commitfeed cascade`.execute(db);
  server = await startTestServer(t, dbUrl); // migrates: a new schema, a new epoch
  const tag = await feedTag(db);
  t.not(parseCursor(held)!.tag, tag, 'a new epoch');
  const after = await publishN(server.url, 's', 1, 10);

  const tagged = await getJson(`${server.url}/v1/streams/s/events?after=${held}`);
  t.match(tagged, { status: 409, body: { code: 'cursor_not_in_feed', reason: 'foreign' } });
  const plain = await getJson(`${server.url}/v1/streams/s/events?after=${untagged(held)}`);
  t.match(plain, { status: 409, body: { code: 'cursor_not_in_feed', reason: 'ahead' } });

  const sse = await openSse(t, `${server.url}/v1/streams/s/events`, { 'last-event-id': held });
  const [reset, first] = await sse.waitFor(2);
  t.same(JSON.parse(reset.data!), { reason: 'foreign', resumeFrom: `0-0.${tag}` });
  t.equal(first.id, after[0], 'then the events of the new history');
});

t.test('a database restored from a backup (same epoch, shorter history): ahead', async (t) => {
  const dbUrl = await testDatabase(t);
  let server = await startTestServer(t, dbUrl);
  const ids = await publishN(server.url, 's', 5);
  await server.close();
  // The backup was taken after the 2nd event: the rows after it and the sequence go back.
  const db = sqlClient(t, dbUrl);
  const second = parseCursor(ids[1])!;
  await sql`delete from commitfeed.feed where id > ${second.id}`.execute(db);
  await sql`select setval('commitfeed.feed_id_seq', ${second.id})`.execute(db);
  server = await startTestServer(t, dbUrl);
  const tag = await feedTag(db);
  t.equal(parseCursor(ids[4])!.tag, tag, 'the restored feed keeps its epoch');

  const json = await getJson(`${server.url}/v1/streams/s/events?after=${ids[4]}`);
  t.match(json, {
    status: 409,
    body: { code: 'cursor_not_in_feed', reason: 'ahead', resumeFrom: `0-0.${tag}` },
  });
  const sse = await openSse(t, `${server.url}/v1/streams/s/events`, { 'last-event-id': ids[4] });
  const [reset, ...kept] = await sse.waitFor(3);
  t.same(JSON.parse(reset.data!), { reason: 'ahead', resumeFrom: `0-0.${tag}` });
  t.same(
    kept.map((m) => m.id),
    ids.slice(0, 2),
    'then every event of the restored history',
  );
  const next = await publish(server.url, 's', { data: 'after the restore' });
  t.equal((await sse.waitFor(4))[3].id, next.body.id, 'and what commits next');
  // A cursor the restored history still holds is fine.
  t.equal((await getJson(`${server.url}/v1/streams/s/events?after=${ids[1]}`)).status, 200);
});

t.test(
  'the TypeScript client: told through onReset, then on with tagged cursors passed through',
  async (t) => {
    const dbUrl = await testDatabase(t);
    const server = await startTestServer(t, dbUrl);
    const tag = await feedTag(sqlClient(t, dbUrl));
    const ids = await publishN(server.url, 's', 2);
    const resets: ResetInfo[] = [];
    const sub = new CommitfeedClient(server.url).subscribe('s', {
      after: FAR,
      onReset: (i) => resets.push(i),
    });
    t.teardown(() => sub.close());
    const got: string[] = [];
    for await (const e of sub) {
      got.push(e.id);
      if (got.length === 2) break;
    }
    t.same(
      resets,
      [{ reason: 'ahead', resumeFrom: `0-0.${tag}`, lastId: FAR }],
      'the reset, with its reason',
    );
    t.same(got, ids, 'then every retained event, ids as the server wrote them');
    t.equal(sub.lastId, ids[1], 'the cursor it resumes from is tagged');
  },
);

t.test('UNKNOWN_CURSOR_RESUME=latest: only what commits from now on', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, { unknownCursorResume: 'latest' });
  const tag = await feedTag(sqlClient(t, dbUrl));
  const old = await publishN(server.url, 's', 2);
  const json = await getJson(`${server.url}/v1/streams/s/events?after=${FAR}`);
  t.equal(json.status, 409);
  const resumeFrom = parseCursor(json.body.resumeFrom)!;
  t.ok(resumeFrom.txid > parseCursor(old[1])!.txid, 'resumeFrom is after every acknowledged write');
  t.equal(json.body.resumeFrom, formatCursor(resumeFrom, tag));
  t.same((await getJson(`${server.url}/v1/streams/s/events?after=${json.body.resumeFrom}`)).body.events, []);
  const sse = await openSse(t, `${server.url}/v1/streams/s/events`, { 'last-event-id': FAR });
  const [reset] = await sse.waitFor(1);
  t.equal(JSON.parse(reset.data!).reason, 'ahead');
  const live = await publish(server.url, 's', { data: 'live' });
  const [, first] = await sse.waitFor(2);
  t.equal(first.id, live.body.id, 'the next event is the first delivered: nothing old');
});

t.test('Mercure: a feed cursor or another feed id as Last-Event-ID replays from earliest', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const post = await fetch(`${server.url}/.well-known/mercure`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams([
      ['topic', 'urn:h'],
      ['data', 'one'],
    ]).toString(),
  });
  t.equal(post.status, 200);
  for (const id of [FAR, `${FAR}.0123abcd`, 'urn:uuid:2d7c3f1c-4b8e-4e63-9a55-1f0d1c2e3f4a']) {
    const res = await fetch(`${server.url}/.well-known/mercure?match=urn:h`, {
      headers: { accept: 'text/event-stream', 'last-event-id': id },
    });
    t.equal(res.status, 200);
    t.equal(res.headers.get('mercure-last-event-id'), 'earliest', `${id}: earliest`);
    await res.body?.cancel();
  }
});
