// Webhook ids against a real PostgreSQL: the delivery log and the resends order attempts and jobs by
// their numbers, not by their texts, once ids grow a digit (9 → 10 → 100); an event's id is the
// tagged cursor every other answer gives, and every input that names an event takes it tagged or not.
import { sql } from 'kysely';
import t from 'tap';
import { resendFailed } from '../src/webhooks/recovery.ts';
import { publish, sqlClient, startTestServer, testDatabase, untagged, until } from './helpers.ts';
import { type Body, api } from './queue-helpers.ts';
import { webhookConfig } from './webhook-helpers.ts';

/** An endpoint that delivers nothing (disabled), for tests that write its log or jobs by hand. */
async function idleEndpoint(base: string, name: string): Promise<void> {
  const made = await api(base, 'POST', '/v1/webhooks', {
    name,
    url: 'http://127.0.0.1:1/hook',
    streams: ['s'],
    enabled: false,
  });
  if (made.status !== 201) throw new Error(`creating ${name}: ${JSON.stringify(made.body)}`);
}

t.test('the delivery log pages newest first by attempt number across 9 → 10 → 100', async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, webhookConfig());
  const db = sqlClient(t, dbUrl);
  await idleEndpoint(server.url, 'log');
  const insert = (n: number) =>
    sql`
    insert into commitfeed.webhook_attempts (endpoint, event_id, attempt, at, ok, latency_ms)
    select 'log', '1-' || g, 1, clock_timestamp(), true, 1 from generate_series(1, ${n}) g`.execute(db);
  // Attempts 8-11, then 99-101.
  await sql`select setval(pg_get_serial_sequence('commitfeed.webhook_attempts', 'id'), 7)`.execute(db);
  await insert(4);
  await sql`select setval(pg_get_serial_sequence('commitfeed.webhook_attempts', 'id'), 98)`.execute(db);
  await insert(3);
  const want = ['101', '100', '99', '11', '10', '9', '8'];

  const all = (await api(server.url, 'GET', '/v1/webhooks/log/attempts')).body.attempts as Body[];
  t.same(
    all.map((a) => a.id),
    want,
    'newest first',
  );
  const paged: string[] = [];
  let before: string | undefined;
  for (let i = 0; i < 10; i++) {
    const q = before === undefined ? '' : `&before=${before}`;
    const page = (await api(server.url, 'GET', `/v1/webhooks/log/attempts?limit=3${q}`)).body
      .attempts as Body[];
    if (page.length === 0) break;
    paged.push(...page.map((a) => a.id as string));
    before = page.at(-1).id;
  }
  t.same(paged, want, 'paging with `before` visits every attempt once');
});

t.test('resending failed deliveries makes them ready again in job order across 9 → 10', async (t) => {
  const db = sqlClient(t, await testDatabase(t));
  await sql`select setval(pg_get_serial_sequence('commitfeed.jobs', 'id'), 7)`.execute(db);
  for (let i = 0; i < 5; i++)
    await sql`select commitfeed.enqueue('webhook:x', ${String(i)}::jsonb)`.execute(db);
  await sql`update commitfeed.jobs set state = 'dead', dead_at = clock_timestamp() where queue = 'webhook:x'`.execute(
    db,
  );
  t.equal(await resendFailed(db, 'webhook:x', new Date(Date.now() - 60_000)), 5);
  // Claims take ready jobs by (priority, run_at, id): the order the resend gave them run_at in.
  const { rows } = await sql<{ job: string }>`
    select id::text as job from commitfeed.jobs where queue = 'webhook:x' and state = 'ready'
    order by run_at, id`.execute(db);
  t.same(
    rows.map((r) => r.job),
    ['8', '9', '10', '11', '12'],
    'ready again in job order',
  );
});

t.test("a webhook-id is the event's id as its publish gave it; inputs take it in either form", async (t) => {
  const dbUrl = await testDatabase(t);
  const server = await startTestServer(t, dbUrl, webhookConfig({ WEBHOOK_RETRY_SCHEDULE: '0,1h' }));
  const db = sqlClient(t, dbUrl);
  // Nothing listens there: every attempt fails, and is logged with its webhook-id.
  const made = await api(server.url, 'POST', '/v1/webhooks', {
    name: 'ids',
    url: 'http://127.0.0.1:1/',
    streams: ['s'],
  });
  t.equal(made.status, 201, JSON.stringify(made.body));
  const http = (await publish(server.url, 's', { data: 'http' })).body.id;
  const viaSql = (await sql<{ id: string }>`select commitfeed.publish('s', '"sql"') as id`.execute(db))
    .rows[0].id;
  const log = async (q = '') =>
    (await api(server.url, 'GET', `/v1/webhooks/ids/attempts${q}`)).body.attempts as Body[];
  await until(
    async () => new Set((await log()).map((a) => a.eventId)).size === 2,
    10_000,
    'an attempt of each event',
  );
  t.same(
    [...new Set((await log()).map((a) => a.eventId))].sort(),
    [http, viaSql].sort(),
    'the webhook-ids are the ids publish returned, over HTTP and in SQL',
  );

  // An attempt made before webhook ids carried the tag, logged with the untagged id.
  await sql`
    insert into commitfeed.webhook_attempts (endpoint, event_id, attempt, at, ok, latency_ms)
    values ('ids', ${untagged(viaSql)}, 1, clock_timestamp(), true, 1)`.execute(db);
  for (const id of [http, untagged(http), `${http}/s`]) {
    const found = await log(`?event=${encodeURIComponent(id)}`);
    t.ok(found.length > 0 && found.every((a) => a.eventId === http), `?event=${id}: that event's attempts`);
  }
  const both = await log(`?event=${viaSql}`);
  t.same(
    new Set(both.map((a) => a.eventId)),
    new Set([viaSql, untagged(viaSql)]),
    'the attempts logged with either form of the id',
  );

  const foreign = `${untagged(http)}.${server.feed.history.tag === '00000000' ? '11111111' : '00000000'}`;
  const resumeFrom = `0-0.${server.feed.history.tag}`;
  const refused = { status: 409, body: { code: 'cursor_not_in_feed', reason: 'foreign', resumeFrom } };
  t.match(
    await api(server.url, 'GET', `/v1/webhooks/ids/attempts?event=${foreign}`),
    refused,
    'log: foreign',
  );
  t.match(
    await api(server.url, 'POST', '/v1/webhooks/ids/resend', { event: foreign }),
    refused,
    'resend: foreign',
  );
  t.match(
    await api(server.url, 'POST', '/v1/webhooks/ids/replay', { from: foreign }),
    refused,
    'replay: foreign',
  );
  t.match(
    await api(server.url, 'POST', '/v1/webhooks', {
      name: 'x',
      url: 'http://127.0.0.1:1/',
      streams: ['s'],
      from: foreign,
    }),
    refused,
    'create: foreign',
  );
  for (const id of [http, untagged(http)]) {
    t.match(await api(server.url, 'POST', '/v1/webhooks/ids/resend', { event: id }), {
      status: 200,
      body: { resent: 1 },
    });
  }
  t.match(await api(server.url, 'POST', '/v1/webhooks/ids/replay', { from: untagged(http) }), {
    status: 200,
    body: { from: http, lost: false, trimMark: resumeFrom },
  });
});
