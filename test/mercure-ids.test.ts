// Generated Mercure ids are the update's position (src/mercure/ids.ts): JavaScript and SQL mint the
// same text, resuming from one finds its update without an id index entry, and updates stored in the
// earlier form (every id in `mid` and in the row, {"topics","id","private","retry","data"}) are still
// served and resumed from as before.
import { sql } from 'kysely';
import t from 'tap';
import { positionId, positionOfId } from '../src/mercure/ids.ts';
import { openSse, sqlClient, startTestServer, testDatabase } from './helpers.ts';

const HUB = '/.well-known/mercure';

t.test('JavaScript and SQL mint the same id for a position, and read it back', async (t) => {
  const db = sqlClient(t, await testDatabase(t));
  const cases: [bigint, bigint][] = [
    [0n, 0n],
    [1n, 1n],
    [4_294_968_000n, 123_456_789n],
    [(1n << 53n) - 1n, (1n << 53n) + 1n],
    [(1n << 60n) - 1n, (1n << 62n) - 1n],
  ];
  for (const [tx, id] of cases) {
    const js = positionId(tx, id);
    const { rows } = await sql<{ id: string }>`
      select commitfeed.mercure_position_id(${tx.toString()}::xid8, ${id.toString()}::int8) as id`.execute(
      db,
    );
    t.equal(rows[0].id, js, `${tx}-${id}`);
    t.match(js, /^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    t.same(positionOfId(js), { txid: tx.toString(), id: id.toString() });
  }
  t.throws(() => positionId(1n << 60n, 1), /out of range/);
  t.throws(() => positionId(1, 1n << 62n), /out of range/);
  await t.rejects(
    sql`select commitfeed.mercure_position_id((1::int8 << 60)::text::xid8, 1)`.execute(db),
    /out of range/,
  );
  for (const other of [
    'urn:uuid:e1ee88e2-532a-4d6f-ba70-f0f8bd584022', // version 4
    'urn:uuid:00000000-0000-8000-0000-000000000001', // variant 0
    'URN:UUID:00000000-0000-8000-8000-000000000001',
    'urn:uuid:00000000-0000-8000-8000-00000000000A',
    'x',
  ]) {
    t.equal(positionOfId(other), undefined, other);
  }
});

async function publish(base: string, pairs: [string, string][]): Promise<string> {
  const res = await fetch(`${base}${HUB}`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams(pairs).toString(),
  });
  if (res.status !== 200) throw new Error(`publish: ${res.status} ${await res.text()}`);
  return res.text();
}

t.test('rows of the earlier stored form are served and resumed from beside generated ids', async (t) => {
  const url = await testDatabase(t);
  const db = sqlClient(t, url);
  // As the hub wrote an update before generated ids were positions: its id in `mid` and in the row,
  // every field present.
  const oldId = 'urn:uuid:e1ee88e2-532a-4d6f-ba70-f0f8bd584022';
  const stored = (id: string, data: string, priv: boolean) =>
    JSON.stringify({ topics: ['urn:t'], id, private: priv, retry: null, data });
  await sql`select commitfeed.append_plain(array['mercure/updates', 'mercure/updates'], array['old', null],
              array[${stored(oldId, 'old-1', false)}::json, ${stored('given-0', 'old-2', false)}::json],
              array[${oldId}, 'given-0'], array['urn:t', 'urn:t'])`.execute(db);
  const server = await startTestServer(t, url);
  const base = server.url;
  const generated = await publish(base, [
    ['topic', 'urn:t'],
    ['data', 'new-1'],
  ]);
  t.not(positionOfId(generated), undefined, 'a generated id is a position');
  const viaSql = (
    await sql<{
      id: string;
    }>`select commitfeed.mercure_publish('urn:t'::text, 'new-2', retry => 7) as id`.execute(db)
  ).rows[0].id;
  t.not(positionOfId(viaSql), undefined, 'so is one generated in SQL');
  const { rows } = await sql<{ mids: number; ided: number }>`
    select count(mid)::int as mids, count(*) filter (where data::jsonb ? 'id')::int as ided
    from commitfeed.feed where stream = 'mercure/updates'`.execute(db);
  t.same(rows[0], { mids: 2, ided: 2 }, 'generated ids are not stored: neither in mid nor in the row');

  const sub = (last: string) => openSse(t, `${base}${HUB}?match=urn:t`, { 'last-event-id': last });
  const all = await sub('earliest');
  const got = await all.waitFor(4);
  t.same(
    got.map((m) => [m.id, m.event, m.data, m.retry]),
    [
      [oldId, 'old', 'old-1', undefined],
      ['given-0', undefined, 'old-2', undefined],
      [generated, undefined, 'new-1', undefined],
      [viaSql, undefined, 'new-2', 7],
    ],
    'old rows framed from their stored id, new ones from their position',
  );
  for (const [from, expect] of [
    [oldId, ['old-2', 'new-1', 'new-2']],
    ['given-0', ['new-1', 'new-2']],
    [generated, ['new-2']],
  ] as const) {
    const res = await fetch(`${base}${HUB}?match=urn:t`, {
      headers: { accept: 'text/event-stream', 'last-event-id': from },
    });
    t.equal(res.headers.get('mercure-last-event-id'), from, `resumes from ${from}`);
    await res.body?.cancel();
    const s = await sub(from);
    t.same(
      (await s.waitFor(expect.length)).map((m) => m.data),
      expect,
      `after ${from}`,
    );
  }
  // A position that holds no update (here a native event's) is unknown, as an unknown id is.
  const native = await fetch(`${base}/v1/streams/n/events`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ data: 1 }),
  });
  t.equal(native.status, 201);
  const { rows: nat } = await sql<{ txid: string; id: string }>`
    select txid::text as txid, id::text as id from commitfeed.feed where stream = 'n'`.execute(db);
  const res = await fetch(`${base}${HUB}?match=urn:t`, {
    headers: { accept: 'text/event-stream', 'last-event-id': positionId(nat[0].txid, nat[0].id) },
  });
  t.equal(res.headers.get('mercure-last-event-id'), 'earliest', 'not an update: unknown');
  await res.body?.cancel();
  const primed = await openSse(t, `${base}${HUB}?match=urn:t`);
  t.equal(primed.primed, viaSql, 'a live stream is primed with the last (generated) id');
});

t.test('a publisher-given id equal to a generated one resolves to the earliest of the two', async (t) => {
  const url = await testDatabase(t);
  const server = await startTestServer(t, url);
  const base = server.url;
  const first = await publish(base, [
    ['topic', 'urn:r'],
    ['data', '1'],
  ]);
  t.equal(
    await publish(base, [
      ['topic', 'urn:r'],
      ['data', '2'],
      ['id', first],
    ]),
    first,
  );
  await publish(base, [
    ['topic', 'urn:r'],
    ['data', '3'],
  ]);
  const s = await openSse(t, `${base}${HUB}?match=urn:r`, { 'last-event-id': first });
  t.same(
    (await s.waitFor(2)).map((m) => m.data),
    ['2', '3'],
    'the generated one is earlier: what follows it, the reuse included',
  );
});
