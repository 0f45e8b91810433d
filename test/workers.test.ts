// WORKERS=2 as a real process tree (src/main.ts as a child process): connections through the one port
// land on both workers; any worker serves any cursor; a worker killed with SIGKILL mid-stream is
// restarted and its subscribers resume elsewhere without a gap or a repeat; /metrics sums the
// workers; SIGTERM drains every worker and the primary exits 0.
import { type ChildProcess, spawn } from 'node:child_process';
import http from 'node:http';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { parseSse, textChunks } from '../src/client/sse.ts';
import { onLogLines, testDatabase, until } from './helpers.ts';
import { nodeArgs } from './ts-node-args.ts';

const ROOT = fileURLToPath(new URL('../', import.meta.url));

interface Cluster {
  proc: ChildProcess;
  url: string;
  /** Worker index → pid, as the workers announced themselves (updated on restart). */
  pids: Map<number, number>;
  lines: string[];
}

function startCluster(t: { teardown(fn: () => unknown): void }, databaseUrl: string): Promise<Cluster> {
  const proc = spawn(process.execPath, nodeArgs('src/main.ts'), {
    cwd: ROOT,
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl,
      WORKERS: '2',
      PORT: '0',
      LOG_LEVEL: 'info',
      SSE_RETRY: '100ms',
      POLL_INTERVAL: '200ms',
      JANITOR_INTERVAL: '0s',
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const pids = new Map<number, number>();
  const lines: string[] = [];
  t.teardown(async () => {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    const gone = new Promise((r) => proc.once('exit', r));
    proc.kill('SIGTERM');
    const timer = setTimeout(() => proc.kill('SIGKILL'), 20000);
    await gone;
    clearTimeout(timer);
    // Workers of a killed primary drain on their own (disconnect); make sure none is left.
    for (const pid of pids.values()) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  });
  return new Promise((resolve, reject) => {
    onLogLines(proc, (line, j) => {
      lines.push(line);
      if (j?.msg === 'worker ready' && typeof j.worker === 'number' && typeof j.pid === 'number')
        pids.set(j.worker, j.pid);
      if (j?.msg === 'commitfeed ready' && typeof j.url === 'string')
        resolve({ proc, url: j.url, pids, lines });
    });
    proc.on('exit', (code) => reject(new Error(`cluster exited with ${code} before it was ready`)));
  });
}

/** A request on a fresh connection (no keep-alive), so the cluster hands it to the next worker. */
function request(
  url: string,
  method: string,
  body?: unknown,
): Promise<{ status: number; worker: string; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      { method, agent: false, headers: body === undefined ? {} : { 'content-type': 'application/json' } },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            worker: String(res.headers['commitfeed-worker']),
            body: text,
          }),
        );
      },
    );
    req.on('error', reject);
    req.setTimeout(3000, () => req.destroy(new Error(`${method} ${url}: no answer in 3 s`)));
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

/**
 * A subscriber that reconnects through the port with Last-Event-ID whenever its stream ends, like a
 * browser's EventSource, recording the worker of every connection and every event it receives.
 */
function subscriber(url: string, stream: string) {
  const state = { data: [] as number[], workers: [] as string[], stopped: false };
  const abort = new AbortController();
  let last: string | undefined;
  const loop = (async () => {
    while (!state.stopped) {
      try {
        const headers: Record<string, string> = { accept: 'text/event-stream' };
        if (last) headers['last-event-id'] = last;
        // No headers within 3 s: the connection went to a dying worker (see publishNext); retry.
        const attempt = new AbortController();
        const stopAttempt = () => attempt.abort();
        abort.signal.addEventListener('abort', stopAttempt, { once: true });
        const timer = setTimeout(stopAttempt, 3000);
        const res = await fetch(`${url}/v1/streams/${stream}/events?from=earliest`, {
          headers,
          signal: attempt.signal,
        }).finally(() => clearTimeout(timer));
        state.workers.push(res.headers.get('commitfeed-worker') ?? '?');
        if (res.status !== 200) throw new Error(`status ${res.status}`);
        for await (const m of parseSse(textChunks(res.body!))) {
          if (m.id !== undefined && m.id !== '') last = m.id;
          if (m.data !== undefined && m.data !== '') state.data.push(JSON.parse(m.data) as number);
        }
      } catch {
        // the worker died or the stream was cut: reconnect below
      }
      if (!state.stopped) await new Promise((r) => setTimeout(r, 100));
    }
  })();
  return {
    state,
    async stop() {
      state.stopped = true;
      abort.abort();
      await loop;
    },
  };
}

t.test('WORKERS=2: one port, any worker serves any cursor, a SIGKILLed worker loses nothing', async (t) => {
  const dbUrl = await testDatabase(t);
  const c = await startCluster(t, dbUrl);
  await until(() => c.pids.size === 2, 10000, 'both workers to log that they are ready');
  t.ok(
    c.lines.filter((l) => l.includes('"migrations applied"') || l.includes('"msg":"migrations')).length <= 1,
    'migrations ran at most once',
  );

  // Publishes through the port on fresh connections are spread over both workers.
  const served = new Set<string>();
  let n = 0;
  // A connection the cluster hands to a worker at the moment it dies is never answered (node:cluster
  // keeps it open): like any client, retry after a timeout, with an idempotency key so that a retry
  // of a publish that did land is not a second event.
  let retried = 0;
  const publishNext = async () => {
    for (let attempt = 1; ; attempt++) {
      try {
        const r = await request(`${c.url}/v1/streams/w/events`, 'POST', { data: n, key: `k${n}` });
        if (r.status !== 201 && r.status !== 200) throw new Error(`publish ${n}: ${r.status} ${r.body}`);
        served.add(r.worker);
        n++;
        return;
      } catch (err) {
        if (attempt === 3) throw err;
        retried++;
      }
    }
  };
  for (let i = 0; i < 10; i++) await publishNext();
  t.same([...served].sort(), ['1', '2'], 'publishes reached both workers');

  // Subscribers from the start, spread over both workers.
  const subs = Array.from({ length: 6 }, () => subscriber(c.url, 'w'));
  t.teardown(() => Promise.all(subs.map((s) => s.stop())));
  await until(() => subs.every((s) => s.state.data.length === 10), 15000, 'every subscriber to catch up');
  const first = subs.map((s) => s.state.workers[0]);
  t.ok(first.includes('1') && first.includes('2'), `subscribers landed on both workers (${first.join(',')})`);

  t.comment('killing worker 1');
  // Publish on while worker 1 dies mid-stream.
  const victim = c.pids.get(1)!;
  for (let i = 0; i < 20; i++) await publishNext();
  t.comment(`published ${n}, killing pid ${victim}`);
  process.kill(victim, 'SIGKILL');
  for (let i = 0; i < 30; i++) await publishNext();
  t.comment(`published ${n} with worker 1 dead`);
  await until(() => c.pids.get(1) !== victim, 30000, 'worker 1 to be restarted');
  t.comment('worker 1 restarted');
  for (let i = 0; i < 10; i++) await publishNext();
  await until(
    () => subs.every((s) => s.state.data.length >= n),
    20000,
    'every subscriber to receive everything',
  );
  const expected = Array.from({ length: n }, (_, i) => i);
  for (const [i, s] of subs.entries()) {
    t.same(
      s.state.data,
      expected,
      `subscriber ${i} (workers ${s.state.workers.join('→')}): gap-free, no repeat`,
    );
  }
  const moved = subs.filter((s) => s.state.workers[0] === '1');
  t.ok(moved.length > 0, 'some subscribers were on the killed worker');
  t.comment(`publishes retried after a connection was lost with the dying worker: ${retried}`);
  t.ok(
    moved.every((s) => s.state.workers.length >= 2),
    'each of them resumed on a new connection (served by another worker or the restarted one)',
  );
  t.ok(
    c.lines.some((l) => l.includes('worker died: restarting it') && l.includes('SIGKILL')),
    'the death is logged with its signal',
  );

  // JSON reads at a cursor are the same on either worker.
  const pages = new Map<string, string>();
  for (let i = 0; i < 4; i++) {
    const r = await request(`${c.url}/v1/streams/w/events?from=earliest&limit=1000`, 'GET');
    pages.set(r.worker, r.body);
  }
  t.equal(new Set(pages.values()).size, 1, `the same page from workers ${[...pages.keys()].join(',')}`);

  // /metrics: the server-wide sum, and one worker's own.
  const all = (await request(`${c.url}/metrics`, 'GET')).body;
  t.match(all, /commitfeed_workers\{state="running"\} 2/);
  t.match(all, /commitfeed_workers\{state="reporting"\} 2/);
  t.match(all, /commitfeed_worker_info\{worker="1",/);
  t.match(all, /commitfeed_worker_info\{worker="2",/);
  // The restarted worker lost its counts; worker 2 kept its own: the sum is at least worker 2's.
  const total = Number(/^commitfeed_publishes_total (\d+)/m.exec(all)?.[1]);
  const one = await request(`${c.url}/metrics?scope=worker`, 'GET');
  const own = Number(/^commitfeed_publishes_total (\d+)/m.exec(one.body)?.[1]);
  t.match(one.body, new RegExp(`commitfeed_worker_info\\{worker="${one.worker}",`));
  t.notMatch(one.body, /commitfeed_workers\{/, 'one worker alone does not report the cluster');
  t.ok(total >= own && total > 0, `server-wide publishes (${total}) include the worker's own (${own})`);
  t.equal((await request(`${c.url}/readyz`, 'GET')).status, 200);

  await Promise.all(subs.map((s) => s.stop()));
  const exit = new Promise<number | null>((r) => c.proc.once('exit', (code) => r(code)));
  c.proc.kill('SIGTERM');
  t.equal(await exit, 0, 'SIGTERM: every worker drained, the primary exits 0');
  for (const pid of c.pids.values()) {
    t.throws(() => process.kill(pid, 0), 'no worker is left running');
  }
});
