import { sql } from 'kysely';
import t from 'tap';
import { publishForm } from './mercure-helpers.ts';
import { openSse, sqlClient, startTestServer, testDatabase } from './helpers.ts';

const DAY = 86_400_000;
const HOUR = 3_600_000;
const todayUtc = () => Math.floor(Date.now() / DAY) * DAY;
const HUB = '/.well-known/mercure';

t.test(
  'an id dropped by retention resumes from earliest, with no reset frame; the topic index follows the feed',
  async (t) => {
    const url = await testDatabase(t);
    const server = await startTestServer(t, url, {
      janitorIntervalMs: 0,
      partitionIntervalMs: HOUR,
      partitionPremake: 3,
      retentionMs: DAY,
    });
    const db = sqlClient(t, url);
    for (let i = 0; i < 3; i++)
      await publishForm(server.url, [
        ['topic', 'urn:t'],
        ['topic', 'urn:t-alternate'],
        ['id', `old-${i}`],
        ['data', `old ${i}`],
      ]);
    const count = async () =>
      (await sql<{ n: number }>`select count(*)::int as n from commitfeed.mercure_topics`.execute(db)).rows[0]
        .n;
    t.equal(await count(), 3, 'one row per other topic (the canonical topic is in the feed row)');
    const run = await server.janitor.runOnce(new Date(todayUtc() + 2 * DAY));
    t.ok(run.dropped.length >= 1, 'partitions dropped');
    t.same(run.errors, []);
    t.equal(run.trimmed.mercureTopics, 3, 'the topic rows of dropped updates are deleted after the drop');
    t.equal(await count(), 0);
    await publishForm(server.url, [
      ['topic', 'urn:t'],
      ['data', 'new 0'],
    ]);
    await publishForm(server.url, [
      ['topic', 'urn:t'],
      ['data', 'new 1'],
    ]);
    for (const matcher of ['match=urn%3At', 'match_urlpattern=urn%5C%3A*']) {
      const res = await fetch(`${server.url}${HUB}?${matcher}`, {
        headers: { accept: 'text/event-stream', 'last-event-id': 'old-1' },
      });
      t.equal(res.headers.get('mercure-last-event-id'), 'earliest', `${matcher}: a trimmed id is unknown`);
      await res.body?.cancel();
      const s = await openSse(t, `${server.url}${HUB}?${matcher}`, { 'last-event-id': 'old-1' });
      t.same(
        (await s.waitFor(2)).map((m) => [m.event, m.data]),
        [
          [undefined, 'new 0'],
          [undefined, 'new 1'],
        ],
        `${matcher}: what retention holds, and no native reset frame`,
      );
    }
  },
);
