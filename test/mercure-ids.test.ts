// Generated Mercure ids of HTTP publishes are the update's position, encrypted (src/mercure/ids.ts):
// resuming from one finds its update without an id index entry, and updates stored in the earlier
// form (every id in `mid` and in the row, {"topics","id","private","retry","data"}) are still served
// and resumed from as before.
import { sql } from 'kysely';
import t from 'tap';
import { publishForm } from './mercure-helpers.ts';
import { randomBytes } from 'node:crypto';
import { MercureIds } from '../src/mercure/ids.ts';
import { loadMercureIds } from '../src/mercure/queries.ts';
import { openSse, sqlClient, startTestServer, testDatabase } from './helpers.ts';

const HUB = '/.well-known/mercure';

const V4 = /^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

t.test(
  'a generated id is its position encrypted: a UUIDv4 that decrypts back, and only with its key',
  async (t) => {
    const ids = new MercureIds(randomBytes(32));
    const other = new MercureIds(randomBytes(32));
    const cases: [bigint, bigint][] = [
      [0n, 0n],
      [1n, 1n],
      [1n, 2n],
      [2n, 1n],
      [4_294_968_000n, 123_456_789n],
      [(1n << 53n) - 1n, (1n << 53n) + 1n],
      [(1n << 60n) - 1n, (1n << 62n) - 1n],
    ];
    const seen = new Set<string>();
    for (const [tx, id] of cases) {
      const mid = ids.idOf(tx, id);
      t.match(mid, V4, `${tx}-${id}`);
      t.same(ids.positionOf(mid), { txid: tx.toString(), id: id.toString() });
      t.not(other.idOf(tx, id), mid, 'another database mints another id');
      seen.add(mid);
    }
    t.equal(seen.size, cases.length, 'distinct positions, distinct ids');
    const key = randomBytes(32);
    const one = new MercureIds(key);
    one.idOf(7, 8);
    t.equal(
      new MercureIds(key).idOf(5, 6),
      one.idOf(5, 6),
      'the same key, the same id, whatever came before',
    );
    // Neighbouring positions share no visible prefix (nothing of their order shows).
    const a = ids.idOf(1000, 5000);
    const b = ids.idOf(1000, 5001);
    t.not(a.slice(9, 17), b.slice(9, 17));
    t.throws(() => ids.idOf(1n << 60n, 1), /out of range/);
    t.throws(() => ids.idOf(1, 1n << 62n), /out of range/);
    t.throws(() => new MercureIds(Buffer.alloc(8)), /too short/);
    for (const no of [
      'urn:uuid:00000000-0000-8000-8000-000000000001', // version 8
      'urn:uuid:00000000-0000-4000-0000-000000000001', // variant 0
      'URN:UUID:E1EE88E2-532A-4D6F-BA70-F0F8BD584022',
      'x',
    ]) {
      t.equal(ids.positionOf(no), undefined, no);
    }
    const any = ids.positionOf('urn:uuid:e1ee88e2-532a-4d6f-ba70-f0f8bd584022');
    t.ok(
      any !== undefined && BigInt(any.txid) < 1n << 60n,
      'any UUIDv4 names some position (checked by the lookup)',
    );
  },
);

t.test('rows of the earlier stored form are served and resumed from beside generated ids', async (t) => {
  const url = await testDatabase(t);
  const db = sqlClient(t, url);
  // As the hub wrote an update before generated ids were encrypted positions: its id in `mid` and in the row,
  // every field present.
  const oldId = 'urn:uuid:e1ee88e2-532a-4d6f-ba70-f0f8bd584022';
  const stored = (id: string, data: string, priv: boolean) =>
    JSON.stringify({ topics: ['urn:t'], id, private: priv, retry: null, data });
  await sql`select commitfeed.append_plain(array['mercure/updates', 'mercure/updates'], array['old', null],
              array[${stored(oldId, 'old-1', false)}::json, ${stored('given-0', 'old-2', false)}::json],
              array[${oldId}, 'given-0'], array['urn:t', 'urn:t'])`.execute(db);
  const server = await startTestServer(t, url);
  const base = server.url;
  const generated = await publishForm(base, [
    ['topic', 'urn:t'],
    ['data', 'new-1'],
  ]);
  const ids = await loadMercureIds(db);
  t.match(generated, V4);
  const viaSql = (
    await sql<{
      id: string;
    }>`select commitfeed.mercure_publish('urn:t'::text, 'new-2', retry => 7) as id`.execute(db)
  ).rows[0].id;
  t.match(viaSql, V4, 'SQL generates a random one');
  const { rows } = await sql<{ mids: number; ided: number }>`
    select count(mid)::int as mids, count(*) filter (where data::jsonb ? 'id')::int as ided
    from commitfeed.feed where stream = 'mercure/updates'`.execute(db);
  t.same(rows[0], { mids: 3, ided: 3 }, 'an HTTP publish stores its generated id nowhere');
  const { rows: pos } = await sql<{ txid: string; id: string }>`
    select f.txid::text as txid, f.id::text as id from commitfeed.feed f where f.mid is null`.execute(db);
  t.equal(ids.idOf(pos[0].txid, pos[0].id), generated, 'it is its row position, encrypted');

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
    headers: { accept: 'text/event-stream', 'last-event-id': ids.idOf(nat[0].txid, nat[0].id) },
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
  const first = await publishForm(base, [
    ['topic', 'urn:r'],
    ['data', '1'],
  ]);
  t.equal(
    await publishForm(base, [
      ['topic', 'urn:r'],
      ['data', '2'],
      ['id', first],
    ]),
    first,
  );
  await publishForm(base, [
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
