// Webhook ids against a real PostgreSQL: the delivery log and the resends order attempts and jobs by
// their numbers, not by their texts, once ids grow a digit (9 → 10 → 100); an event's id is the
// tagged cursor every other answer gives, and every input that names an event takes it tagged or not.
import { sql } from 'kysely';
import t from 'tap';
import { resendFailed } from '../src/webhooks/recovery.ts';
import { sqlClient, startTestServer, testDatabase } from './helpers.ts';
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
