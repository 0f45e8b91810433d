import t from 'tap';
import { publishForm } from './mercure-helpers.ts';
import { openSse, pgClient, startTestServer, testDatabase } from './helpers.ts';

const HUB = '/.well-known/mercure';

function form(pairs: [string, string][]): string {
  const f = new URLSearchParams();
  for (const [k, v] of pairs) f.append(k, v);
  return f.toString();
}

const sub = (base: string, pairs: [string, string][]) => `${base}${HUB}?${form(pairs)}`;

t.test(
  'two instances on one database: a publish on A reaches B; resume on B after A stops (R1, §5.11)',
  async (t) => {
    const url = await testDatabase(t);
    const a = await startTestServer(t, url);
    const b = await startTestServer(t, url);
    for (const matcher of [
      ['match', 'urn:r'],
      ['match_urlpattern', 'urn\\:*'],
    ] as [string, string][]) {
      const onA = await openSse(t, sub(a.url, [matcher]));
      const onB = await openSse(t, sub(b.url, [matcher]));
      const first = [];
      for (let i = 0; i < 5; i++)
        first.push(
          await publishForm(a.url, [
            ['topic', 'urn:r'],
            ['data', `${matcher[0]} ${i}`],
          ]),
        );
      t.same(
        (await onB.waitFor(5)).map((m) => m.id),
        first,
        `${matcher[0]}: B receives A's updates in order`,
      );
      const got = await onA.waitFor(3);
      onA.close();
      // More updates while the subscriber is away, some published on B.
      const rest = first.slice(3);
      for (let i = 5; i < 10; i++) {
        rest.push(
          await publishForm(i % 2 ? b.url : a.url, [
            ['topic', 'urn:r'],
            ['data', `${matcher[0]} ${i}`],
          ]),
        );
      }
      const resumed = await openSse(t, sub(b.url, [matcher]), { 'last-event-id': got[2].id! });
      t.same(
        (await resumed.waitFor(rest.length)).map((m) => m.id),
        rest,
        `${matcher[0]}: resumed on the other instance with no gap and no duplicate`,
      );
      onB.close();
      resumed.close();
    }
    // An instance that stops: its subscriber resumes on the other from its last id.
    const onA = await openSse(t, sub(a.url, [['match', 'urn:k']]));
    const ids = [
      await publishForm(a.url, [
        ['topic', 'urn:k'],
        ['data', '1'],
      ]),
    ];
    const [m1] = await onA.waitFor(1);
    await a.close();
    ids.push(
      await publishForm(b.url, [
        ['topic', 'urn:k'],
        ['data', '2'],
      ]),
    );
    const onB = await openSse(t, sub(b.url, [['match', 'urn:k']]), { 'last-event-id': m1.id! });
    t.same(
      (await onB.waitFor(1)).map((m) => m.data),
      ['2'],
    );
  },
);

t.test('an update whose transaction commits last is not skipped (out-of-order commits)', async (t) => {
  const url = await testDatabase(t);
  const server = await startTestServer(t, url);
  const exact = await openSse(t, sub(server.url, [['match', 'urn:o']]));
  const pattern = await openSse(t, sub(server.url, [['match_urlpattern', 'urn\\:*']]));
  const slow = await pgClient(t, url);
  await slow.query('begin');
  // Takes its feed id first...
  await slow.query(`select commitfeed.mercure_publish('urn:o', 'slow', id => 'slow')`);
  // ...then a later transaction commits first.
  const fast = await publishForm(server.url, [
    ['topic', 'urn:o'],
    ['data', 'fast'],
    ['id', 'fast'],
  ]);
  t.equal(fast, 'fast');
  await slow.query('commit');
  for (const s of [exact, pattern]) {
    t.same((await s.waitFor(2)).map((m) => m.data).sort(), ['fast', 'slow'], 'both delivered, each once');
  }
  // A catch-up from the first one delivered gets the other, through the topic index and the stream.
  const firstId = exact.received[0].id!;
  const other = exact.received[1].data;
  for (const matcher of [
    ['match', 'urn:o'],
    ['match_urlpattern', 'urn\\:*'],
  ] as [string, string][]) {
    const c = await openSse(t, sub(server.url, [matcher]), { 'last-event-id': firstId });
    await server.feed.tailer.settled();
    t.same(
      (await c.waitFor(1)).map((m) => m.data),
      [other],
      `${matcher[0]} catch-up`,
    );
  }
});
