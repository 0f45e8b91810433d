// commitfeed SIGKILLed mid-delivery: every committed event still reaches the receiver — those
// committed while commitfeed was down included — deduplicated on webhook-id exactly once, and the
// ordered endpoint never reorders. The service is a child process (src/main.ts); the receiver is
// another (test/fixtures/webhook-receiver.mjs), verifying every delivery with standardwebhooks.
import { sql } from 'kysely';
import t from 'tap';
import { publish, sqlClient, startService, testDatabase, until, within } from './helpers.ts';
import { api } from './queue-helpers.ts';
import { Receiver, committed, receiverPort } from './webhook-helpers.ts';

const ENV = {
  WORKERS: '1',
  POLL_INTERVAL: '100ms',
  WEBHOOK_ALLOW_ADDRESSES: '127.0.0.1',
  WEBHOOK_RETRY_SCHEDULE: '0,50ms,100ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms',
};

t.test('SIGKILL mid-delivery: every event once after deduplication, in order', async (t) => {
  const dbUrl = await testDatabase(t);
  const db = sqlClient(t, dbUrl);
  const rx = new Receiver(t, await receiverPort(10));
  await rx.start({ WH_DELAY_MS: '5' });
  let svc = await startService(t, dbUrl, ENV);
  const secrets: string[] = [];
  for (const [name, mode] of [
    ['ordered', 'ordered'],
    ['concurrent', 'concurrent'],
  ]) {
    const made = await api(svc.url, 'POST', '/v1/webhooks', {
      name,
      url: `http://127.0.0.1:${rx.port}/${name}`,
      streams: ['k.*'],
      mode,
      timeoutSeconds: 1,
      ...(mode === 'concurrent' ? { concurrency: 4 } : {}),
    });
    t.equal(made.status, 201, JSON.stringify(made.body));
    secrets.push(made.body.secret);
  }
  await rx.control({ secrets });
  for (let i = 0; i < 10; i++) {
    await publish(
      svc.url,
      `k.${i % 3}`,
      Array.from({ length: 15 }, (_, j) => ({ data: { i, j } })),
    );
  }
  await until(() => rx.deliveries().length >= 40, 20_000, 'deliveries under way');
  const exited = new Promise<void>((r) => svc.proc.once('exit', () => r()));
  svc.proc.kill('SIGKILL');
  await within(exited, 10_000, 'the service to exit');
  // Committed while commitfeed is down (an application's own transaction).
  await sql`select commitfeed.publish('k.down', jsonb_build_object('n', g)) from generate_series(1, 20) g`.execute(
    db,
  );
  svc = await startService(t, dbUrl, ENV);
  await publish(
    svc.url,
    'k.after',
    Array.from({ length: 10 }, (_, j) => ({ data: { j } })),
  );

  const want = await committed(db, '^k\\.');
  t.equal(want.length, 180);
  const byPath = (p: string) => rx.deliveries().filter((d) => d.path === p);
  const ids = (p: string) => [
    ...new Set(
      byPath(p)
        .filter((d) => d.status < 300)
        .map((d) => d.id),
    ),
  ];
  await until(
    () => ids('/ordered').length >= 180 && ids('/concurrent').length >= 180,
    40_000,
    'every event at both',
  );
  t.same(ids('/ordered'), want, 'ordered: exactly the committed events, in feed order');
  t.same([...ids('/concurrent')].sort(), [...want].sort(), 'concurrent: exactly the committed events');
  const index = new Map(want.map((c, i) => [c, i]));
  const order = byPath('/ordered').map((d) => index.get(d.id)!);
  t.ok(
    order.every((v, i) => i === 0 || v >= order[i - 1]),
    'ordered: never an event before an earlier one, across the kill',
  );
  t.ok(
    byPath('/ordered').every((d) => d.verified.length === 1 && d.verified[0] === 0),
    'ordered: every delivery verified with its secret',
  );
  t.ok(
    byPath('/concurrent').every((d) => d.verified.length === 1 && d.verified[0] === 1),
    'concurrent: every delivery verified with its secret',
  );
  t.comment(`deliveries: ${rx.deliveries().length} for ${2 * want.length} events`);
});
