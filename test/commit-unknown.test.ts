// A connection lost around a COMMIT: the answer says what is known. Behind a transaction-mode pooler
// the group commit's statement runs inside BEGIN … COMMIT (src/db/pooled-client.ts); a connection lost
// before the COMMIT left nothing stored (503 `unavailable`), one lost while the COMMIT's answer was on
// its way may have stored everything (503 `commit_unknown`, src/db/commit-outcome.ts), and a retry with
// the same key tells which. A pooler restarted under load does the second (the PgBouncer chaos test
// found it); here a proxy between the service and PostgreSQL cuts the connection at the chosen moment.
import net from 'node:net';
import { sql } from 'kysely';
import t from 'tap';
import { freePort, publish, sqlClient, startTestServer, testDatabase } from './helpers.ts';

type Cut = 'none' | 'statement' | 'commit-answer';

/**
 * A TCP proxy in front of PostgreSQL that reads the client's protocol messages and, once armed, cuts
 * the client's connection: at the next write statement (never sent on), or after that statement's
 * COMMIT was sent on and answered (the answer is dropped). The server side is closed too, as a pooler
 * closing its server connection would.
 */
async function cuttingProxy(t: { teardown(fn: () => unknown): void }, target: URL) {
  let cut: Cut = 'none';
  let cuts = 0;
  const port = await freePort();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    let buf = Buffer.alloc(0);
    let started = false;
    let dropAnswer = false;
    /** This connection carries the armed write: its next COMMIT's answer is dropped. */
    let writing = false;
    const close = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', close);
    upstream.on('error', close);
    client.on('close', () => upstream.end());
    upstream.on('data', (chunk) => {
      if (dropAnswer) {
        // The COMMIT reached the server and it answered: the client never hears it.
        cuts++;
        close();
      } else client.write(chunk);
    });
    client.on('data', (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      // Whole messages only: the startup message has no type byte, every later one has one.
      for (;;) {
        const head = started ? 1 : 0;
        if (buf.length < head + 4) return;
        const size = head + buf.readInt32BE(head);
        if (buf.length < size) return;
        const msg = buf.subarray(0, size);
        buf = buf.subarray(size);
        started = true;
        const type = String.fromCharCode(msg[0]);
        // The group commit's write (the pool also carries the service's own reads and marks).
        const isWrite = head === 1 && type === 'P' && /commitfeed\.append_/.test(msg.toString('utf8', 5));
        if (isWrite && cut === 'statement') {
          cut = 'none';
          cuts++;
          close();
          return;
        }
        if (isWrite && cut === 'commit-answer') {
          cut = 'none';
          writing = true;
        }
        if (writing && type === 'Q' && /^commit\b/i.test(msg.toString('utf8', 5))) {
          writing = false;
          dropAnswer = true;
        }
        upstream.write(msg);
      }
    });
  });
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => server.close(() => r())));
  const url = new URL(target.toString());
  url.hostname = '127.0.0.1';
  url.port = String(port);
  return {
    url: url.toString(),
    arm(how: Cut) {
      cut = how;
    },
    cuts: () => cuts,
  };
}

t.test('a connection lost at the COMMIT is answered commit_unknown; before it, unavailable', async (t) => {
  const direct = await testDatabase(t);
  const proxy = await cuttingProxy(t, new URL(direct));
  // Pooled mode on the proxy (DATABASE_URL), sessions on the server itself; no janitor passes, so
  // the only COMMITs through the proxy are the publishes'.
  const s = await startTestServer(t, proxy.url, { directDatabaseUrl: direct, janitorIntervalMs: 0 });
  const check = sqlClient(t, direct);
  const stored = async (key: string) =>
    (
      await sql<{ n: number }>`select count(*)::int as n from commitfeed.feed where key = ${key}`.execute(
        check,
      )
    ).rows[0].n;

  t.equal(
    (await publish(s.url, 'orders', { data: 0, key: 'warm' })).status,
    201,
    'a publish through the proxy',
  );

  // Lost before the COMMIT: the server rolls the open transaction back.
  proxy.arm('statement');
  const before = await publish(s.url, 'orders', { data: 1, key: 'k1' });
  t.equal(before.status, 503);
  t.equal(before.body.code, 'unavailable', 'nothing stored, and the answer says so');
  t.equal(await stored('k1'), 0);

  // Lost after the COMMIT was sent: stored, and the answer does not claim otherwise.
  proxy.arm('commit-answer');
  const lost = await publish(s.url, 'orders', { data: 2, key: 'k2' });
  t.equal(lost.status, 503);
  t.equal(lost.body.code, 'commit_unknown', JSON.stringify(lost.body));
  t.match(lost.body.message, /may have been stored/);
  t.equal(lost.headers.get('retry-after'), '2');
  t.equal(await stored('k2'), 1, 'the COMMIT was carried out');
  const retry = await publish(s.url, 'orders', { data: 2, key: 'k2' });
  t.equal(retry.status, 200);
  t.equal(retry.body.duplicate, true, 'a retry with the same key learns it was stored');

  // A batch is one statement and one COMMIT: all of it, and one answer for all of it.
  proxy.arm('commit-answer');
  const batch = await publish(s.url, 'orders', [
    { data: 3, key: 'k3' },
    { data: 4, key: 'k4' },
  ]);
  t.equal(batch.body.code, 'commit_unknown');
  t.equal((await stored('k3')) + (await stored('k4')), 2);
  t.equal(proxy.cuts(), 3, 'each armed cut happened');

  // The service goes on through new connections.
  t.equal((await publish(s.url, 'orders', { data: 5, key: 'k5' })).status, 201);
});
