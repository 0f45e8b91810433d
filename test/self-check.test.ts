// The delivery self-check (src/ops/self-check.ts): a marker through every stage, never seen by a
// reader, no wake for other processes; each stage stalled for real (a throwing fan-out, a lock on the
// feed, a lock the tail read waits on, a held transaction, a deaf LISTEN connection behind a proxy,
// a read-only role), each named in one log line, and /readyz following: 503 only after
// SELF_CHECK_MISSES tail-read or hub misses, `degraded` for the others, ready again on recovery.
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import t, { type Test } from 'tap';
import { type Config, loadConfig } from '../src/config/config.ts';
import { MARKER_STREAM } from '../src/feed/marker.ts';
import type { Miss } from '../src/ops/self-check.ts';
import { type Server, startServer } from '../src/server.ts';
import {
  CURSOR_TEXT,
  adminUrl,
  openSse,
  pgClient,
  publish,
  startTestServer,
  testDatabase,
  until,
} from './helpers.ts';

// Short enough for a quick file, long enough that a busy 2-core machine passes a healthy marker.
const ON: Partial<Config> = {
  selfCheckIntervalMs: 250,
  selfCheckBoundMs: 500,
  selfCheckMisses: 2,
  logLevel: 'info',
};

type LogLine = { level: number; msg: string } & Record<string, unknown>;

/** The self-check's log lines from every server of this process (pino writes to a replaced stdout). */
function captureLogs(t: Test): LogLine[] {
  const lines: LogLine[] = [];
  const write = process.stdout.write;
  process.stdout.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
    const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString();
    if (!text.startsWith('{"level"'))
      return (write as (...a: unknown[]) => boolean).call(process.stdout, chunk, ...rest);
    const line = JSON.parse(text) as LogLine;
    if (line.msg.includes('self-check')) lines.push(line);
    return true;
  }) as typeof process.stdout.write;
  t.teardown(() => {
    process.stdout.write = write;
  });
  return lines;
}

const misses = (s: Server, m: Miss) => s.selfCheck.stats.misses[m];
const checks = (s: Server) => s.selfCheck.stats.checks;
const passed = (s: Server) => s.selfCheck.status()?.state === 'ok' && s.selfCheck.status()?.lastOkAt !== null;
const missLines = (logs: LogLine[], stage: Miss) => logs.filter((l) => l.level === 40 && l.stage === stage);

async function readyz(s: Server) {
  const res = await fetch(`${s.url}/readyz`);
  return { status: res.status, body: (await res.json()) as Record<string, never> };
}

/** Waits until `n` more checks have run (each one at most interval + bound). */
async function moreChecks(s: Server, n: number): Promise<void> {
  const target = checks(s) + n;
  await until(() => checks(s) >= target, n * 1500 + 2000, `${n} more self-checks`);
}

t.test(
  'a marker passes every stage, no reader sees it, and other processes take no wake from it',
  async (t) => {
    const logs = captureLogs(t);
    const url = await testDatabase(t);
    // Nothing is stalled here, so a long bound costs no time, and a loaded machine's slow first
    // commit (a new pool connection) is no miss.
    // B reads the tail only when woken (no poll within the test), so its reads count its wakes. It
    // starts first, listening before A writes its first marker: B hears every one of them.
    const b = await startTestServer(t, url, { pollIntervalMs: 60_000 });
    const a = await startTestServer(t, url, { ...ON, selfCheckBoundMs: 2000 });
    t.equal((await publish(a.url, 'orders', { data: { n: 1 } })).status, 201);
    const glob = await openSse(t, `${b.url}/v1/events?stream=*&from=earliest`);
    const globHere = await openSse(t, `${a.url}/v1/events?stream=*&from=earliest`);
    const admin = await pgClient(t, url);
    await admin.query(`select commitfeed.mercure_publish('urn:selfcheck', 'hello')`);
    const hub = await openSse(t, `${a.url}/.well-known/mercure?match_urlpattern=*&last_event_id=earliest`);
    await until(() => passed(a), 5000, 'a passing self-check');
    await b.feed.tailer.settled();
    const bReads = b.feed.tailer.stats.reads;
    const bHeard = b.feed.listener.stats.foreignMarkers;
    await moreChecks(a, 3);
    const markersHeard = () => b.feed.listener.stats.foreignMarkers - bHeard;
    await until(() => markersHeard() >= 3, 2000, "the other process to hear A's markers");
    // One read of slack for a late wake of the set-up's writes; a wake per marker would be one each.
    t.ok(b.feed.tailer.stats.reads - bReads <= 1, `and read nothing for them (${markersHeard()} heard)`);
    for (const reader of [glob, globHere, hub]) await reader.waitFor(1);

    const { stats } = a.selfCheck;
    t.same(stats.misses, { commit: 0, wake: 0, tail_read: 0, hub: 0, horizon: 0 }, 'no stage missed');
    for (const s of ['commit', 'wake', 'tail_read', 'hub'] as const) {
      t.ok(stats.seconds[s]! > 0 && stats.seconds[s]! < 2, `${s} reached in ${stats.seconds[s]} s`);
    }
    const { rows } = await admin.query(`select count(*)::int as n from commitfeed.feed where stream = $1`, [
      MARKER_STREAM,
    ]);
    t.ok(rows[0].n >= 4, `the markers are in the feed (${rows[0].n})`);
    const ready = await readyz(a);
    t.equal(ready.status, 200);
    t.equal(ready.body.status, 'ready');
    t.same(ready.body.checks, { database: true, listener: true, tailer: true, delivery: true });
    t.match(ready.body.selfCheck, { state: 'ok', stalled: [], consecutiveMisses: 0, lastOkAt: String });
    t.notOk((await readyz(b)).body.selfCheck, 'a process with the check off shows none');
    const metrics = await (await fetch(`${a.url}/metrics`)).text();
    t.ok(Number(/commitfeed_selfcheck_checks_total (\d+)/.exec(metrics)?.[1]) >= 4, 'checks counted');
    t.match(metrics, /commitfeed_selfcheck_misses_total\{stage="tail_read"\} 0/);
    t.match(metrics, /commitfeed_selfcheck_stage_seconds\{stage="hub"\} 0\.\d+/);
    t.match(metrics, /commitfeed_selfcheck_last_ok_timestamp_seconds 1\d{9}/);
    t.same(logs, [], 'nothing logged while delivery is healthy');

    // Never in a user read: from=earliest, globs here and elsewhere, the stream list, the live page,
    // the Mercure hub; the name itself is refused.
    const earliest = await (await fetch(`${a.url}/v1/streams/orders/events?from=earliest`)).json();
    t.equal(earliest.events.length, 1, 'from=earliest: the one user event');
    const named = await fetch(
      `${a.url}/v1/streams/${encodeURIComponent(MARKER_STREAM)}/events?from=earliest`,
    );
    t.equal(named.status, 400, 'the internal name cannot be read');
    t.same(
      (await (await fetch(`${a.url}/v1/streams`)).json()).streams.map((s: { name: string }) => s.name),
      ['orders'],
    );
    t.same(
      a.sampler.streamRows().map((r) => r.name),
      ['orders'],
      "the live page's streams view",
    );
    t.same(
      glob.received.map((m) => m.data),
      ['{"n":1}'],
      'a glob from earliest on another process',
    );
    t.same(
      globHere.received.map((m) => m.data),
      ['{"n":1}'],
      'a glob from earliest, live while markers pass',
    );
    t.same(
      hub.received.map((m) => m.data),
      ['hello'],
      'Mercure from earliest',
    );

    // The other process heard every marker's NOTIFY and was woken by none: only by the publish.
    const heard = b.feed.listener.stats;
    t.ok(heard.foreignMarkers >= 4, `foreign markers heard (${heard.foreignMarkers})`);
    t.equal(
      heard.notifications - heard.own - heard.foreignMarkers,
      2,
      'woken by the publish and the SQL publish',
    );
    t.equal(a.feed.listener.stats.foreignMarkers, 0, 'its own markers are not foreign');
  },
);

/**
 * A TCP proxy to PostgreSQL that can make the LISTEN connection deaf: `deafen()` holds whatever the
 * server sends to connections whose startup packet names `commitfeed-listen` (a half-dead connection:
 * no error, no data), `resume()` delivers it. Other connections pass untouched.
 */
async function deafeningProxy(t: Test, target: URL) {
  let deaf = false;
  const flushes = new Set<() => void>();
  const sockets = new Set<net.Socket>();
  const proxy = net.createServer((client) => {
    const upstream = net.connect(Number(target.port), target.hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => {
        client.destroy();
        upstream.destroy();
      });
    }
    let listen: boolean | undefined;
    const held: Buffer[] = [];
    const flush = () => {
      for (const d of held.splice(0)) client.write(d);
    };
    client.on('data', (d: Buffer) => {
      listen ??= d.includes('commitfeed-listen');
      upstream.write(d);
    });
    upstream.on('data', (d: Buffer) => {
      if (listen && deaf) {
        held.push(d);
        flushes.add(flush);
        return;
      }
      flush();
      client.write(d);
    });
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
  t.teardown(() => {
    for (const s of sockets) s.destroy();
    proxy.close();
  });
  const url = new URL(target);
  url.port = String((proxy.address() as net.AddressInfo).port);
  return {
    url: url.toString(),
    deafen: () => {
      deaf = true;
    },
    resume: () => {
      deaf = false;
      for (const f of flushes) f();
      flushes.clear();
    },
  };
}

t.test('a deaf LISTEN connection is a wake miss: degraded, still 200, the poll delivers', async (t) => {
  const logs = captureLogs(t);
  const proxy = await deafeningProxy(t, new URL(await testDatabase(t)));
  const s = await startTestServer(t, proxy.url, ON);
  await until(() => passed(s), 5000, 'a passing self-check');
  proxy.deafen();
  await until(() => misses(s, 'wake') >= 1, 5000, 'a wake miss');
  t.ok(s.feed.listener.connected, 'the listener still counts as connected');
  t.same(s.selfCheck.status()?.stalled, ['wake'], 'only the wake stalled: the tail read was poked');
  const degraded = await readyz(s);
  t.equal(degraded.status, 200, 'still in rotation: the poll delivers');
  t.match(degraded.body, {
    status: 'degraded',
    checks: { delivery: true },
    selfCheck: { state: 'degraded' },
  });
  const [line] = missLines(logs, 'wake');
  t.match(line.msg, /not heard by the listener after 500ms \(wake stalled: NOTIFY not reaching/);
  t.match(line, { stalled: ['wake'], ms: { commit: Number, wake: null, tail_read: Number, hub: Number } });
  proxy.resume();
  await until(() => passed(s), 5000, 'a passing self-check after the listener hears again');
  t.equal((await readyz(s)).body.status, 'ready');
  t.ok(
    logs.some((l) => l.level === 30 && l.msg.startsWith('self-check passed again')),
    'the recovery is logged',
  );
  await s.close();
});

t.test('stalled fan-out, commit, tail read and horizon: each named, /readyz follows', async (t) => {
  const logs = captureLogs(t);
  const url = await testDatabase(t);
  const s = await startTestServer(t, url, ON);
  const admin = await pgClient(t, url);
  await until(() => passed(s), 5000, 'a passing self-check');
  // Counted from here: a loaded machine may have made the first marker slow.
  const recovered = () => logs.filter((l) => l.msg.startsWith('self-check passed again')).length;
  const [recoveredBefore, wakeBefore] = [recovered(), misses(s, 'wake')];
  // Each stall is judged on its own counts and lines: a loaded machine may have made an earlier
  // phase miss a stage too (the bound is 500 ms), which must not stand in for this phase's misses.
  let since = logs.length;
  let before = { ...s.selfCheck.stats.misses };
  const phase = () => {
    since = logs.length;
    before = { ...s.selfCheck.stats.misses };
  };
  const stageLines = (stage: Miss) => missLines(logs.slice(since), stage);
  const missed = (stage: Miss, n: number) =>
    until(() => misses(s, stage) - before[stage] >= n, 5000, `${n} ${stage} misses`);

  // hub: a listener that throws makes the hub drop the rest of the page.
  const stopThrowing = s.feed.hub.listen(MARKER_STREAM, () => {
    throw new Error('fan-out failed');
  });
  await missed('hub', 1);
  stopThrowing();
  t.match(stageLines('hub')[0], { stalled: ['hub'], msg: /not fanned out by the hub after 500ms/ });
  await until(() => passed(s), 5000, 'a pass after the hub stall');

  // commit: the feed locked; one marker waits, later checks miss without writing another.
  phase();
  await admin.query('begin');
  await admin.query('lock table commitfeed.feed in access exclusive mode');
  await missed('commit', 2);
  const other = await pgClient(t, url);
  const { rows } = await other.query(
    `select count(*)::int as n from pg_stat_activity
     where query like '%insert into commitfeed.feed%pg_notify%' and wait_event_type = 'Lock'`,
  );
  t.equal(rows[0].n, 1, 'one marker write waits, not one per check');
  t.match(s.selfCheck.status(), { state: 'degraded', stalled: ['commit'], consecutiveMisses: 0 });
  const [first, second] = stageLines('commit');
  t.match(first.msg, /not committed after 500ms \(commit stalled/);
  t.match(second.msg, /the previous marker has still not committed/);
  await admin.query('rollback');
  await until(() => passed(s), 5000, 'a pass after the commit stall');

  // tail read: TAIL_SQL reads the trim mark; the insert and its NOTIFY do not.
  phase();
  await admin.query('begin');
  await admin.query('lock table commitfeed.trim_mark in access exclusive mode');
  await missed('tail_read', 2);
  const failing = await readyz(s);
  t.equal(failing.status, 503, 'out of rotation after SELF_CHECK_MISSES');
  t.match(failing.body, {
    code: 'not_ready',
    checks: { database: true, listener: true, tailer: true, delivery: false },
    selfCheck: { state: 'failing', stalled: ['tail_read'], consecutiveMisses: 2 },
  });
  const tail = stageLines('tail_read');
  t.match(tail[0], { readiness: 'degraded', msg: /not read by the tailer after 500ms \(tail read stalled/ });
  t.match(tail[1], { readiness: 'failing' });
  await admin.query('rollback');
  await until(() => passed(s), 5000, 'a pass after the tail read stall');
  t.equal((await readyz(s)).status, 200, 'back in rotation');

  // horizon: an open writing transaction anywhere holds the marker back; never a 503.
  phase();
  await admin.query('begin');
  const { rows: held } = await admin.query('select pg_backend_pid() as pid, pg_current_xact_id()');
  await missed('horizon', 2);
  const horizon = await readyz(s);
  t.equal(horizon.status, 200, 'every replica shares a horizon stall: still in rotation');
  t.match(horizon.body, { status: 'degraded', selfCheck: { stalled: ['horizon'], consecutiveMisses: 0 } });
  t.match(stageLines('horizon')[0], {
    msg: /still behind the horizon after 500ms/,
    blocker: { pid: held[0].pid },
    readiness: 'degraded',
    marker: CURSOR_TEXT,
  });
  await admin.query('rollback');
  await until(() => passed(s), 5000, 'a pass after the horizon stall');
  t.equal(misses(s, 'wake'), wakeBefore, 'the wake never stalled');
  t.equal(recovered() - recoveredBefore, 4, 'each recovery logged');
});

t.test('a deployment that cannot write turns the check off with one line, not a miss', async (t) => {
  const logs = captureLogs(t);
  const url = await testDatabase(t);
  const role = `cf_ro_${randomBytes(4).toString('hex')}`;
  const admin = await pgClient(t, adminUrl());
  await admin.query(`create role ${role} login superuser password 'ro'`);
  await admin.query(`alter role ${role} set default_transaction_read_only = on`);
  const asRole = new URL(url);
  asRole.username = role;
  asRole.password = 'ro';
  const config: Config = {
    ...loadConfig({}),
    ...ON,
    port: 0,
    databaseUrl: asRole.toString(),
    pollIntervalMs: 200,
  };
  // The schema is there already (the role could not apply it).
  const s = await startServer(config, { migrate: false });
  try {
    await until(() => !s.selfCheck.enabled, 5000, 'the check to turn itself off');
    const checksThen = checks(s);
    await new Promise((r) => setTimeout(r, 600));
    t.equal(checks(s), checksThen, 'no check runs any more');
    t.same(s.selfCheck.stats.misses, { commit: 0, wake: 0, tail_read: 0, hub: 0, horizon: 0 });
    t.same(
      logs.map((l) => l.msg),
      ['self-check off: this deployment cannot write to the feed (set SELF_CHECK_INTERVAL=0 to say so)'],
    );
    t.match(logs[0], { code: '25006' });
    const ready = await readyz(s);
    t.equal(ready.status, 200);
    t.notOk('delivery' in ready.body.checks, 'no delivery check while off');
  } finally {
    await s.close();
    await admin.query(`drop role ${role}`);
  }
});
