// A connection lost around a commit: the answer says what is known. A statement that commits — a
// COMMIT, or any statement sent outside a transaction, as the group commit's append on a direct
// connection is — and loses its connection after it was sent may have been stored: 503
// `commit_unknown` (src/db/commit-outcome.ts), and a retry with the same key tells which. Lost before
// anything that commits was sent, nothing was stored: 503 `unavailable`. A pooler restarted under
// load loses COMMIT answers (the PgBouncer chaos test found it), a PostgreSQL restarted at once loses
// the answers of statements it committed; here a proxy between the service and PostgreSQL cuts the
// connection at the chosen moment.
import net from 'node:net';
import Fastify from 'fastify';
import { type Kysely, sql } from 'kysely';
import t from 'tap';
import { Batcher } from '../src/commit/batcher.ts';
import { CommitUnknownError, isUnavailable } from '../src/db/commit-outcome.ts';
import { createDatabase, type Database } from '../src/db/database.ts';
import type { CheckedEventInput } from '../src/feed/event.ts';
import { appendCheckedEvents } from '../src/feed/queries/append-checked.ts';
import { installErrorHandlers } from '../src/http/errors.ts';
import { freePort, publish, sqlClient, startTestServer, testDatabase, until } from './helpers.ts';

/**
 * What the proxy does to the next group-commit write (a statement of commitfeed.append_*):
 * - statement: cuts the connection at it (never sent on to PostgreSQL);
 * - commit-answer: sends it and the transaction's COMMIT on, and cuts the connection when the
 *   COMMIT's answer comes (the answer is dropped);
 * - answer: sends it on, through its Sync (where an autocommit statement commits), and cuts the
 *   connection when its answer comes (dropped);
 * - refuse: cuts every open connection at once and every new one at its start, until disarmed.
 */
type Cut = 'none' | 'statement' | 'commit-answer' | 'answer' | 'refuse';

const WRITE = /commitfeed\.append_/;

/** The null-terminated strings at the start of a protocol message's body. */
function cstrings(msg: Buffer, n: number): string[] {
  const out: string[] = [];
  let at = 5;
  for (let i = 0; i < n; i++) {
    const end = msg.indexOf(0, at);
    if (end < 0) break;
    out.push(msg.toString('utf8', at, end));
    at = end + 1;
  }
  return out;
}

/**
 * A TCP proxy in front of PostgreSQL that reads the client's protocol messages and cuts a connection
 * as armed (Cut). Both sides are closed, as a pooler closing its server connection or a PostgreSQL
 * going down would. A write is a Parse of the append, or a Bind of a prepared statement that was one.
 */
async function cuttingProxy(t: { teardown(fn: () => unknown): void }, target: URL) {
  let cut: Cut = 'none';
  let cuts = 0;
  const open = new Set<() => void>();
  const port = await freePort();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    let buf = Buffer.alloc(0);
    let started = false;
    let dropAnswer = false;
    /** This connection carries the armed write: the answer to what commits it is dropped. */
    let writing: 'commit' | 'sync' | null = null;
    /** Prepared statements of this connection that are the append. */
    const writes = new Set<string>();
    const close = () => {
      open.delete(close);
      client.destroy();
      upstream.destroy();
    };
    if (cut === 'refuse') {
      close();
      return;
    }
    open.add(close);
    client.on('error', close);
    upstream.on('error', close);
    client.on('close', () => upstream.end());
    upstream.on('data', (chunk) => {
      if (dropAnswer) {
        // What commits the write reached the server and it answered: the client never hears it.
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
        const type = head === 1 ? String.fromCharCode(msg[0]) : '';
        let isWrite = false;
        if (type === 'P') {
          const [name, text] = cstrings(msg, 2);
          isWrite = WRITE.test(text ?? '');
          if (isWrite && name) writes.add(name);
        } else if (type === 'B') isWrite = writes.has(cstrings(msg, 2)[1] ?? '');
        if (isWrite && cut === 'statement') {
          cut = 'none';
          cuts++;
          close();
          return;
        }
        if (isWrite && (cut === 'commit-answer' || cut === 'answer')) {
          writing = cut === 'answer' ? 'sync' : 'commit';
          cut = 'none';
        }
        upstream.write(msg);
        if (
          (writing === 'commit' && type === 'Q' && /^commit\b/i.test(msg.toString('utf8', 5))) ||
          (writing === 'sync' && type === 'S')
        ) {
          writing = null;
          dropAnswer = true;
        }
      }
    });
  });
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  t.teardown(() => {
    for (const close of [...open]) close();
    return new Promise<void>((r) => server.close(() => r()));
  });
  const url = new URL(target.toString());
  url.hostname = '127.0.0.1';
  url.port = String(port);
  return {
    url: url.toString(),
    arm(how: Cut) {
      cut = how;
      if (how === 'refuse') for (const close of [...open]) close();
    },
    cuts: () => cuts,
  };
}

/** Rows of the feed with event key `key`, read past the proxy. */
function counter(db: Kysely<Database>) {
  return async (key: string) =>
    (await sql<{ n: number }>`select count(*)::int as n from commitfeed.feed where key = ${key}`.execute(db))
      .rows[0].n;
}

t.test('behind a pooler: lost at the COMMIT, commit_unknown; before it, unavailable', async (t) => {
  const direct = await testDatabase(t);
  const proxy = await cuttingProxy(t, new URL(direct));
  // Pooled mode on the proxy (DATABASE_URL), sessions on the server itself; no janitor passes, so
  // the only COMMITs through the proxy are the publishes'.
  const s = await startTestServer(t, proxy.url, { directDatabaseUrl: direct, janitorIntervalMs: 0 });
  const stored = counter(sqlClient(t, direct));

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

t.test('on a direct connection: an autocommit write that lost its answer is commit_unknown', async (t) => {
  const direct = await testDatabase(t);
  const proxy = await cuttingProxy(t, new URL(direct));
  // Every connection of the service through the proxy; the group commit's append is one autocommit
  // statement (prepared: after its first run, a Bind of its name).
  const s = await startTestServer(t, proxy.url, { janitorIntervalMs: 0 });
  const stored = counter(sqlClient(t, direct));
  for (const key of ['warm1', 'warm2'])
    t.equal((await publish(s.url, 'orders', { data: 0, key })).status, 201);

  // Committed, its answer lost: stored, and said to be possibly stored.
  proxy.arm('answer');
  const lost = await publish(s.url, 'orders', { data: 1, key: 'd1' });
  t.equal(lost.status, 503);
  t.equal(lost.body.code, 'commit_unknown', JSON.stringify(lost.body));
  t.equal(lost.headers.get('retry-after'), '2');
  t.equal(await stored('d1'), 1, 'the statement committed');
  const retry = await publish(s.url, 'orders', { data: 1, key: 'd1' });
  t.equal(retry.status, 200, JSON.stringify(retry.body));
  t.equal(retry.body.duplicate, true, 'a retry with the same key learns it was stored');

  // Sent by the service but cut before PostgreSQL had it: the service cannot tell this from the
  // case above, so it says unknown too, and the retry learns that nothing was stored.
  proxy.arm('statement');
  const cut = await publish(s.url, 'orders', { data: 2, key: 'd2' });
  t.equal(cut.body.code, 'commit_unknown', JSON.stringify(cut.body));
  t.equal(await stored('d2'), 0);
  const again = await publish(s.url, 'orders', { data: 2, key: 'd2' });
  t.equal(again.status, 201, JSON.stringify(again.body));
  t.notOk(again.body.duplicate, 'the retry stored it, once');

  t.equal(proxy.cuts(), 2, 'each armed cut happened');
  const res = await fetch(`${s.url}/v1/streams/orders/events?limit=10`);
  t.equal(res.status, 200, 'the service goes on through new connections');
});

t.test('the group commit: every request of an unknown commit is told so; unsent, none is', async (t) => {
  const direct = await testDatabase(t);
  const proxy = await cuttingProxy(t, new URL(direct));
  const log = { warn() {}, error() {} };
  const { db, pool } = createDatabase({ url: proxy.url, poolSize: 2, statementTimeoutMs: 5000, log });
  t.teardown(() => db.destroy());
  const stored = counter(sqlClient(t, direct));
  // One statement at a time, each held until released: the requests that arrive while one is held
  // go out together as the next.
  const gates: (() => void)[] = [];
  const groups: number[] = [];
  const batcher = new Batcher(db, {
    maxEvents: 100,
    maxInflight: 1,
    write: async (conn, items: readonly CheckedEventInput[]) => {
      groups.push(items.length);
      await new Promise<void>((r) => gates.push(r));
      return appendCheckedEvents(conn, items);
    },
  });
  const ev = (key: string) => ({ stream: 'g', type: null, key, data: '{}' }) as CheckedEventInput;
  const first = batcher.publish([ev('g0')]);
  await until(() => gates.length === 1, 5000, 'the first statement');
  const group = ['g1', 'g2', 'g3'].map((k) =>
    batcher.publish([ev(k)]).then(
      () => 'stored',
      (err: unknown) => err,
    ),
  );
  gates.shift()!();
  await first;
  await until(() => gates.length === 1, 5000, 'the group statement');
  proxy.arm('answer');
  gates.shift()!();
  const outcomes = await Promise.all(group);
  for (const o of outcomes) t.ok(o instanceof CommitUnknownError, `each request: ${String(o)}`);
  t.equal((await stored('g1')) + (await stored('g2')) + (await stored('g3')), 3, 'one statement, all stored');
  t.same(groups, [1, 3], 'the three went as one statement');

  // The connection gone before the statement was sent (the pool has dropped its cut connections,
  // and no new one opens): plainly unavailable, and nothing stored.
  proxy.arm('refuse');
  await until(() => pool.totalCount === 0, 5000, 'the pool to drop its cut connections');
  const unsent = batcher.publish([ev('g4')]).then(
    () => 'stored',
    (err: unknown) => err,
  );
  await until(() => gates.length === 1, 5000, 'the statement');
  gates.shift()!();
  const err = await unsent;
  t.ok(isUnavailable(err), `unavailable: ${String(err)}`);
  t.notOk(err instanceof CommitUnknownError, 'and certainly not stored');
  t.equal(await stored('g4'), 0);
  proxy.arm('none');
  await batcher.close();
});

t.test('a GET whose read lost its answer stored nothing: unavailable, not commit_unknown', async (t) => {
  const app = Fastify();
  installErrorHandlers(app);
  const lost = () => {
    throw new CommitUnknownError(new Error('Connection terminated unexpectedly'));
  };
  app.get('/read', lost);
  app.post('/write', lost);
  t.teardown(() => app.close());
  const read = await app.inject({ method: 'GET', url: '/read' });
  t.equal(read.statusCode, 503);
  t.equal(read.json().code, 'unavailable');
  const write = await app.inject({ method: 'POST', url: '/write' });
  t.equal(write.statusCode, 503);
  t.equal(write.json().code, 'commit_unknown');
});
