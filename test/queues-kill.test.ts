// Kill the workers (issue #18): no job lost, none completed twice, none ever held by two live leases
// at once — with worker processes SIGKILLed mid-claim, mid-work and mid-ack, one replica SIGKILLed and
// restarted, and a worker frozen (SIGSTOP) past its lease whose late ack must change nothing.
//
// Two commitfeed replicas (child processes) share one database. Worker processes
// (test/fixtures/queue-worker.mjs) loop claim → work → ack over HTTP and write a line before and
// after every request. Three queues: ordered groups, a concurrency limit, plain jobs. When every job
// is completed, the workers' lines, the jobs table and an audit of every lease the database handed
// out are checked against each other.
//
// Clocks: every interval is on the database server's clock (the same host clock as this process):
// a lease starts when the claim statement set it (the audit trigger's clock_timestamp(), or
// leaseExpiresAt minus the lease asked for, as the worker saw it), and ends at its expiry, or when
// the ack that completed the job ran (finished_at). The claim API gives leaseExpiresAt in whole
// milliseconds (truncated), so intervals read from workers' lines are up to 1 ms early; two
// intervals count as overlapping only if they overlap by more than EPS_MS = 2 ms.
import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { type Kysely, sql } from 'kysely';
import t from 'tap';
import type { Database } from '../src/db/database.ts';
import { freePort, pgClient, sqlClient, testDatabase, until, within } from './helpers.ts';
import { api, claim, enqueue } from './queue-helpers.ts';
import { nodeArgs } from './ts-node-args.ts';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const WORKER = fileURLToPath(new URL('./fixtures/queue-worker.mjs', import.meta.url));

const LEASE_S = 2;
const EPS_MS = 2;
const LIVE_WORKERS = 5;
const GROUPS = 16;
const PER_GROUP = 40;
const LIMITED = 360;
const LIMIT = 4;
const PLAIN = 1000;
/** QUEUES_KILL_VERBOSE=1: progress every 3 s. */
const VERBOSE = process.env.QUEUES_KILL_VERBOSE === '1';
/** The frozen-worker cases (see below), one queue and one job each. */
const staleCases = ['stale-expired', 'stale-mismatch', 'stale-completed'] as const;
const Q = { groups: 'kq-groups', limited: 'kq-limited', plain: 'kq-plain' };

// biome-ignore lint/suspicious/noExplicitAny: tap's Test type is not needed in detail here
type T = { teardown(fn: () => unknown): void } & Record<string, any>;

/** A worker's line (see test/fixtures/queue-worker.mjs), tagged with the worker that wrote it. */
interface Line {
  w: string;
  e: 'up' | 'claim' | 'claimed' | 'claimfail' | 'ack' | 'ack503' | 'acked' | 'neterr';
  q?: string;
  id?: string;
  lease?: string;
  attempt?: number;
  exp?: number;
  L?: number;
  status?: number;
  code?: string;
}

/** Every process this file starts, so the exit hook can kill them even if tap's teardown never runs. */
const everyProcess = new Set<ChildProcess>();
process.once('exit', () => {
  for (const p of everyProcess) p.kill('SIGKILL');
});

function track(t: T, proc: ChildProcess): void {
  everyProcess.add(proc);
  t.teardown(() => {
    // SIGKILL also ends a stopped (SIGSTOP) process.
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
  });
}

/** A replica: `src/main.ts` on a fixed port, so it comes back at the same URL after a SIGKILL. */
class Replica {
  proc: ChildProcess | undefined;
  constructor(
    readonly t: T,
    readonly databaseUrl: string,
    readonly port: number,
    readonly logFile: string,
  ) {}
  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }
  async start(): Promise<void> {
    const fd = openSync(this.logFile, 'a');
    const proc = spawn(process.execPath, nodeArgs('src/main.ts'), {
      cwd: ROOT,
      env: {
        ...process.env,
        DATABASE_URL: this.databaseUrl,
        HOST: '127.0.0.1',
        PORT: String(this.port),
        WORKERS: '1',
        // info: start-up and shutdown (with its reason) in the log, not every request.
        LOG_LEVEL: 'info',
      },
      stdio: ['ignore', fd, fd],
    });
    closeSync(fd);
    this.proc = proc;
    track(this.t, proc);
    await until(
      async () => {
        if (proc.exitCode !== null || proc.signalCode !== null) {
          throw new Error(`replica on ${this.port} exited while starting (log: ${this.logFile})`);
        }
        try {
          const res = await fetch(`${this.url}/readyz`);
          await res.arrayBuffer();
          return res.status === 200;
        } catch {
          return false;
        }
      },
      60_000,
      `the replica on port ${this.port} to be ready (log: ${this.logFile})`,
    );
  }
  async kill(): Promise<void> {
    const p = this.proc!;
    const exited = new Promise<void>((r) => p.once('exit', () => r()));
    p.kill('SIGKILL');
    await within(exited, 10_000, 'a SIGKILLed replica to exit');
  }
}

/** A worker process and the lines it wrote (read until its stdout closes). */
class Worker {
  readonly proc: ChildProcess;
  readonly lines: Line[] = [];
  readonly closed: Promise<void>;
  badLines = 0;
  /** Resolves at the worker's first line (it is up and working), or when it exits. */
  readonly started: Promise<void>;
  private waiters: { e: Line['e']; resolve: (l: Line | null) => void }[] = [];
  private onFirst: () => void = () => {};

  constructor(
    t: T,
    readonly name: string,
    env: Record<string, string>,
  ) {
    this.proc = spawn(process.execPath, [WORKER], {
      env: { ...process.env, CF_WORKER: name, CF_LEASE: String(LEASE_S), ...env },
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    track(t, this.proc);
    // A killed worker's stdin is gone: writing to it must not crash this process.
    this.proc.stdin!.on('error', () => {});
    const rl = createInterface({ input: this.proc.stdout! });
    rl.on('line', (text) => {
      let line: Line;
      try {
        line = { ...JSON.parse(text), w: name };
      } catch {
        this.badLines++;
        return;
      }
      this.lines.push(line);
      this.onFirst();
      const hit = this.waiters.filter((x) => x.e === line.e);
      this.waiters = this.waiters.filter((x) => x.e !== line.e);
      for (const x of hit) x.resolve(line);
    });
    this.closed = new Promise((resolve) => this.proc.once('close', () => resolve()));
    this.started = Promise.race([new Promise<void>((r) => (this.onFirst = r)), this.closed]);
    void this.closed.then(() => {
      for (const x of this.waiters) x.resolve(null);
      this.waiters = [];
    });
  }

  get alive(): boolean {
    return this.proc.exitCode === null && this.proc.signalCode === null;
  }

  /** The next line of kind `e` this worker writes, or null if it exits or `ms` pass first. */
  next(e: Line['e'], ms: number): Promise<Line | null> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((x) => x.resolve !== done);
        resolve(null);
      }, ms);
      const done = (l: Line | null) => {
        clearTimeout(timer);
        resolve(l);
      };
      this.waiters.push({ e, resolve: done });
    });
  }

  async kill(): Promise<void> {
    if (this.alive) this.proc.kill('SIGKILL');
    await within(this.closed, 10_000, `worker ${this.name} to exit after SIGKILL`);
  }
}

/**
 * Every lease the database hands out, recorded by a trigger in the claim's own transaction (so a
 * rolled-back claim leaves nothing, and a claim whose answer never reached a killed worker is still
 * seen). A BEFORE trigger runs right after the row's new values are computed: `at` is the lease's
 * start to within microseconds. INSERT too: an enqueue may insert a job already leased to a waiting
 * claim of its process (the hand-off); here every job is enqueued before any worker claims, so none is.
 */
async function installLeaseAudit(db: Kysely<Database>): Promise<void> {
  await sql`create table public.lease_audit (
      job int8 not null, queue text not null, group_key text, lease uuid not null, attempt int4 not null,
      expires timestamptz not null, op text not null, at timestamptz not null default clock_timestamp())`.execute(
    db,
  );
  await sql`create function public.audit_lease() returns trigger language plpgsql as $$
    begin
      if new.state = 'leased' then
        if tg_op = 'INSERT' or new.lease is distinct from old.lease then
          insert into public.lease_audit (job, queue, group_key, lease, attempt, expires, op)
          values (new.id, new.queue, new.group_key, new.lease, new.attempt, new.lease_expires_at, tg_op);
        end if;
      end if;
      return new;
    end $$`.execute(db);
  await sql`create trigger audit_lease before insert or update on commitfeed.jobs
    for each row execute function public.audit_lease()`.execute(db);
}

interface Interval {
  job: string;
  lease: string;
  start: number;
  end: number;
}

/** Pairs of intervals (sorted by start) that overlap by more than EPS_MS. */
function overlaps(intervals: Interval[]): string[] {
  const sorted = [...intervals].sort((a, b) => a.start - b.start);
  const bad: string[] = [];
  let latest: Interval | undefined; // the interval ending last so far
  for (const iv of sorted) {
    if (latest && iv.start < latest.end - EPS_MS) {
      bad.push(
        `job ${iv.job} lease ${iv.lease.slice(0, 8)} started ${(latest.end - iv.start).toFixed(3)} ms before job ${latest.job} lease ${latest.lease.slice(0, 8)} ended`,
      );
    }
    if (!latest || iv.end > latest.end) latest = iv;
  }
  return bad;
}

/** The most intervals live at one moment (an interval counts from start to end - EPS_MS). */
function peak(intervals: Interval[]): number {
  const events = intervals.flatMap((iv) => [
    { at: iv.start, d: 1 },
    { at: iv.end - EPS_MS, d: -1 },
  ]);
  events.sort((a, b) => a.at - b.at || a.d - b.d);
  let n = 0;
  let most = 0;
  for (const ev of events) {
    n += ev.d;
    most = Math.max(most, n);
  }
  return most;
}

const first = <X>(xs: X[], n = 10) => xs.slice(0, n);

// About 40 s on an idle 2-core machine; the bounds below leave room for a busy one.
t.setTimeout(200_000);

t.test(
  'SIGKILLed workers (mid-claim, mid-work, mid-ack), a SIGKILLed replica, a frozen worker: every job completed once, never two live leases on a job, a group or past the limit',
  async (t) => {
    const started = Date.now();
    const dbUrl = await testDatabase(t);
    const db = sqlClient(t, dbUrl);
    await installLeaseAudit(db);
    // The replicas' logs and every worker line, kept when the test fails.
    const logDir = mkdtempSync(path.join(os.tmpdir(), 'commitfeed-qkill-'));
    t.teardown(() => {
      if (t.passing()) rmSync(logDir, { recursive: true, force: true });
    });
    const ports = [await freePort(), await freePort()];
    const replicas = ports.map((p, i) => new Replica(t, dbUrl, p, path.join(logDir, `replica-${i}.log`)));
    await Promise.all(replicas.map((r) => r.start()));
    const [r0, r1] = replicas;
    t.comment(`replicas ready after ${Date.now() - started} ms (logs in ${logDir})`);

    // The jobs: ordered groups enqueued interleaved (so ids of a group are spread out), a limited
    // queue, plain jobs, and one job each for the frozen-worker cases. maxAttempts is high so
    // that no job is dead-lettered by the leases the kills leave to expire.
    const maxAttempts = 100;
    const groupJobs = [];
    for (let i = 0; i < PER_GROUP; i++) {
      for (let g = 0; g < GROUPS; g++) groupJobs.push({ payload: { g, i }, group: `g${g}`, maxAttempts });
    }
    t.equal((await enqueue(r0.url, Q.groups, groupJobs)).status, 201, 'grouped jobs enqueued');
    t.same((await api(r0.url, 'POST', `/v1/queues/${Q.limited}/concurrency`, { limit: LIMIT })).body, {
      queue: Q.limited,
      concurrency: LIMIT,
    });
    t.equal(
      (
        await enqueue(
          r1.url,
          Q.limited,
          Array.from({ length: LIMITED }, (_, i) => ({ payload: i, maxAttempts })),
        )
      ).status,
      201,
      'limited jobs enqueued',
    );
    for (let i = 0; i < PLAIN; i += 500) {
      const batch = Array.from({ length: Math.min(500, PLAIN - i) }, (_, k) => ({
        payload: i + k,
        maxAttempts,
      }));
      t.equal(
        (await enqueue(replicas[(i / 500) % 2].url, Q.plain, batch)).status,
        201,
        'plain jobs enqueued',
      );
    }
    for (const q of staleCases) {
      t.equal((await enqueue(r0.url, q, { payload: q, maxAttempts })).status, 201, `${q}: its job enqueued`);
    }
    const total = GROUPS * PER_GROUP + LIMITED + PLAIN + staleCases.length;

    // This test's own claims and acks (the frozen-worker cases), in the workers' line format.
    const parentLines: Line[] = [];
    const workers: Worker[] = [];
    let spawned = 0;
    const startWorker = (env: Record<string, string> = {}) => {
      const n = spawned++;
      const urls = n % 2 === 0 ? [r0.url, r1.url] : [r1.url, r0.url];
      const w = new Worker(t, `w${n}`, {
        CF_URLS: urls.join(','),
        CF_QUEUES: [Q.groups, Q.limited, Q.plain].join(','),
        CF_MAX: '5',
        CF_WAIT: '1',
        CF_WORK_MS: '15',
        ...env,
      });
      workers.push(w);
      return w;
    };

    // The watcher polls the table, as test/queues-groups.test.ts does: live leases per group and in
    // the limited queue every 20 ms, progress every 200 ms (its own connection and prepared
    // statements: it runs for the whole test, beside the replicas, on a 2-core machine).
    const watch = await pgClient(t, dbUrl);
    let stop = false;
    let groupOverlaps = 0;
    let limitedPeak = 0;
    let completed = 0;
    let lastReport = 0;
    const kills: Record<string, number> = { claim: 0, claimed: 0, ack: 0, missed: 0 };
    const watcher = (async () => {
      for (let i = 0; !stop; i++) {
        const { rows } = await watch.query<{ overlaps: number; limited: number }>({
          name: 'watch-leases',
          text: `select
              (select count(*)::int4 from (
                 select 1 from commitfeed.jobs where queue = $1 and state = 'leased'
                   and lease_expires_at > clock_timestamp()
                 group by group_key having count(*) > 1) x) as overlaps,
              (select count(*)::int4 from commitfeed.jobs where queue = $2 and state = 'leased'
                 and lease_expires_at > clock_timestamp()) as limited`,
          values: [Q.groups, Q.limited],
        });
        groupOverlaps += rows[0].overlaps;
        limitedPeak = Math.max(limitedPeak, rows[0].limited);
        if (i % 10 === 0) {
          const done = await watch.query<{ n: number }>({
            name: 'watch-completed',
            text: `select count(*)::int4 as n from commitfeed.jobs where state = 'completed'`,
          });
          completed = done.rows[0].n;
        }
        if (VERBOSE && Date.now() - lastReport > 3000) {
          lastReport = Date.now();
          const { rows: per } = await watch.query<{ queue: string; state: string; n: number }>(
            'select queue, state, count(*)::int4 as n from commitfeed.jobs group by 1, 2 order by 1, 2',
          );
          t.comment(
            `${Date.now() - started} ms, kills ${JSON.stringify(kills)}: ${per.map((r) => `${r.queue}/${r.state}=${r.n}`).join(' ')}`,
          );
        }
        await new Promise((r) => setTimeout(r, 20));
      }
    })();

    // The frozen worker, three times: it claims the only job of its queue and is stopped (SIGSTOP)
    // past its lease, then continued (SIGCONT) and acks with its stale lease. The ack must be refused
    // (409) and leave the job's row exactly as it was:
    //   stale-expired   nobody claimed the job meanwhile: 409 lease_expired (then the test claims it);
    //   stale-mismatch  the test claimed the job again and still holds it: 409 lease_mismatch;
    //   stale-completed the test claimed the job again and acked it: 409 job_completed.
    const jobRow = async (id: string) =>
      (
        await sql<Record<string, unknown>>`
          select state, attempt, lease::text as lease, lease_expires_at::text as lease_expires_at,
                 result::text as result, finished_at::text as finished_at
          from commitfeed.jobs where id = ${id}::int8`.execute(db)
      ).rows[0];
    const staleResults: { queue: string; status?: number; code?: string }[] = [];
    const frozen = async (queue: (typeof staleCases)[number]) => {
      const w = startWorker({ CF_QUEUES: queue, CF_GATED: '1', CF_MAX: '1' });
      const mine = await within(w.next('claimed', 20_000), 25_000, `${queue}: the frozen worker's claim`);
      if (!mine) throw new Error(`${queue}: the gated worker exited before claiming`);
      w.proc.kill('SIGSTOP');
      // Open the gate now: the line waits in the pipe, the worker reads it only once continued.
      w.proc.stdin!.write('go\n');
      const reclaim = async () => {
        let again: Awaited<ReturnType<typeof claim>> = [];
        // A long-poll claim is woken when the frozen lease comes due.
        await until(
          async () => {
            parentLines.push({ w: 'parent', e: 'claim', q: queue });
            again = await claim(r0.url, queue, { max: 1, lease: 30, wait: 5 });
            return again.length > 0;
          },
          30_000,
          `${queue}: the job to be claimable again once the frozen worker's lease ran out`,
        );
        const [j] = again;
        parentLines.push({
          w: 'parent',
          e: 'claimed',
          q: queue,
          id: j.id,
          lease: j.lease,
          attempt: j.attempt,
          exp: Date.parse(j.leaseExpiresAt),
          L: 30,
        });
        t.equal(j.id, mine.id, `${queue}: the same job, claimed again`);
        t.equal(j.attempt, mine.attempt! + 1, `${queue}: its attempt counts`);
        return j;
      };
      const parentAck = async (j: { id: string; lease: string }) => {
        parentLines.push({ w: 'parent', e: 'ack', q: queue, id: j.id, lease: j.lease });
        const res = await api(r0.url, 'POST', `/v1/queues/${queue}/jobs/${j.id}/ack`, {
          lease: j.lease,
          result: { lease: j.lease, worker: 'parent' },
        });
        parentLines.push({ w: 'parent', e: 'acked', q: queue, id: j.id, lease: j.lease, status: res.status });
        t.equal(res.status, 204, `${queue}: the live lease acks`);
      };
      let held: { id: string; lease: string } | undefined;
      if (queue === 'stale-expired') {
        await until(
          async () =>
            (
              await sql<{ over: boolean }>`
                select lease_expires_at <= clock_timestamp() as over from commitfeed.jobs where id = ${mine.id}::int8`.execute(
                db,
              )
            ).rows[0].over,
          30_000,
          `${queue}: the frozen worker's lease to run out`,
        );
      } else {
        held = await reclaim();
        if (queue === 'stale-completed') await parentAck(held);
      }
      const before = await jobRow(mine.id!);
      w.proc.kill('SIGCONT');
      const late = await within(w.next('acked', 20_000), 25_000, `${queue}: the continued worker's ack`);
      if (!late) throw new Error(`${queue}: the continued worker exited before its ack was answered`);
      staleResults.push({ queue, status: late.status, code: late.code });
      const why = {
        'stale-expired': 'lease_expired',
        'stale-mismatch': 'lease_mismatch',
        'stale-completed': 'job_completed',
      };
      if (
        !t.same(
          [late.status, late.code],
          [409, why[queue]],
          `${queue}: the stale ack is refused: 409 ${late.code}`,
        )
      ) {
        throw new Error(`${queue}: the stale ack was answered ${late.status}, not 409 ${why[queue]}`);
      }
      t.same(await jobRow(mine.id!), before, `${queue}: the stale ack changed nothing`);
      if (queue === 'stale-expired') await parentAck(await reclaim());
      if (queue === 'stale-mismatch') await parentAck(held!);
      await within(w.closed, 10_000, `${queue}: the gated worker to exit`);
    };
    const frozenCases = (async () => {
      for (const q of staleCases) await frozen(q);
    })();

    // The killer: keeps LIVE_WORKERS workers running; every 400–900 ms picks one and SIGKILLs it the
    // moment it writes the line that starts a claim, a job's work or an ack (in turn), and sets a
    // spare to work in its place. Spares are started ahead (a node process takes seconds to start
    // on a busy machine: without them much of the pool would always be starting). The pause between
    // kills paces the chaos; nothing waits on it to be correct.
    let live: Worker[] = Array.from({ length: LIVE_WORKERS }, () => startWorker());
    const spares: Worker[] = [startWorker({ CF_SPARE: '1' }), startWorker({ CF_SPARE: '1' })];
    let replicaRestarted = false;
    const phases = ['claim', 'claimed', 'ack'] as const;
    const killer = (async () => {
      for (let k = 0; !stop; k++) {
        await new Promise((r) => setTimeout(r, 400 + Math.random() * 500));
        const ready = live.filter((w) => w.lines.length > 0);
        if (stop || ready.length === 0) continue;
        const w = ready[Math.floor(Math.random() * ready.length)];
        const phase = phases[k % phases.length];
        const hit = await w.next(phase, 1000);
        await w.kill();
        kills[hit ? phase : 'missed']++;
        const spare = spares.shift()!;
        spares.push(startWorker({ CF_SPARE: '1' }));
        await within(spare.started, 30_000, `spare worker ${spare.name} to start`);
        spare.proc.stdin!.write('go\n');
        live = live.filter((x) => x !== w).concat(spare);
      }
    })();
    // One replica SIGKILLed once a third of the jobs are done, and restarted on the same port
    // (workers on it fail over to the other meanwhile).
    const replicaChaos = (async () => {
      await until(() => stop || completed >= total / 3, 60_000, 'a third of the jobs to be completed');
      if (stop) return;
      await r1.kill();
      await r1.start();
      replicaRestarted = true;
    })();

    // Any background task that fails ends the wait at once, with its own error.
    const never = new Promise<never>(() => {});
    const failure = Promise.race(
      [watcher, killer, replicaChaos, frozenCases].map((p) => p.then(() => never)),
    );
    try {
      await within(
        Promise.race([
          (async () => {
            await until(() => stop || completed === total, 120_000, 'every job to be completed');
            await frozenCases;
            await replicaChaos;
          })(),
          failure,
        ]),
        130_000,
        () => `every job completed (${completed} of ${total}), kills ${JSON.stringify(kills)}`,
      );
    } finally {
      stop = true;
      await Promise.allSettled([watcher, killer, replicaChaos, frozenCases]);
      await Promise.all(workers.map((w) => w.kill()));
      writeFileSync(
        path.join(logDir, 'lines.jsonl'),
        [...workers.flatMap((w) => w.lines), ...parentLines].map((l) => JSON.stringify(l)).join('\n'),
      );
    }
    t.comment(
      `every job completed after ${Date.now() - started} ms; ${spawned} workers started, kills ${JSON.stringify(kills)}`,
    );

    // ---- What the workers said, the jobs table and the lease audit, against each other.
    const lines = [...workers.flatMap((w) => w.lines), ...parentLines];
    t.equal(
      workers.reduce((n, w) => n + w.badLines, 0),
      0,
      'every worker line parsed',
    );
    const jobs = (
      await sql<{
        id: string;
        queue: string;
        group_key: string | null;
        state: string;
        attempt: number;
        done_lease: string | null;
        fin: number | null;
      }>`
        select id::text as id, queue, group_key, state, attempt, result->>'lease' as done_lease,
               extract(epoch from finished_at)::float8 * 1000 as fin
        from commitfeed.jobs order by id`.execute(db)
    ).rows;
    const grants = (
      await sql<{ job: string; lease: string; attempt: number; start: number; exp: number }>`
        select job::text as job, lease::text as lease, attempt,
               extract(epoch from at)::float8 * 1000 as start, extract(epoch from expires)::float8 * 1000 as exp
        from public.lease_audit order by at`.execute(db)
    ).rows;

    t.equal(jobs.length, total, 'every job is still in the table');
    t.same(
      first(jobs.filter((j) => j.state !== 'completed').map((j) => `${j.id} ${j.state}`)),
      [],
      'every job ends completed',
    );
    const jobById = new Map(jobs.map((j) => [j.id, j]));
    const grantsByJob = new Map<string, typeof grants>();
    for (const g of grants) grantsByJob.set(g.job, [...(grantsByJob.get(g.job) ?? []), g]);
    const grantByLease = new Map(grants.map((g) => [g.lease, g]));

    // A lease is live from its start until its expiry, or until the ack that completed the job.
    const endOf = (job: string, lease: string, exp: number) => {
      const j = jobById.get(job)!;
      return j.done_lease === lease && j.fin !== null ? Math.min(j.fin, exp) : exp;
    };
    const auditIntervals: Interval[] = grants.map((g) => ({
      job: g.job,
      lease: g.lease,
      start: g.start,
      end: endOf(g.job, g.lease, g.exp),
    }));

    // Attempts: one more per hand-out; the completing lease is the last one, and acked while live.
    const attemptErrors: string[] = [];
    const completionErrors: string[] = [];
    let redelivered = 0;
    for (const j of jobs) {
      const gs = grantsByJob.get(j.id) ?? [];
      if (gs.length > 1) redelivered++;
      const attempts = gs.map((g) => g.attempt);
      if (attempts.join() !== gs.map((_, i) => i + 1).join() || j.attempt !== gs.length) {
        attemptErrors.push(`job ${j.id}: attempts ${attempts.join(',')} by time, ${j.attempt} in the table`);
      }
      const last = gs.at(-1);
      if (!last || j.done_lease !== last.lease) {
        completionErrors.push(
          `job ${j.id}: completed by lease ${j.done_lease}, last handed out ${last?.lease}`,
        );
      } else if (j.fin === null || j.fin < last.start || j.fin >= last.exp) {
        completionErrors.push(`job ${j.id}: acked at ${j.fin}, outside its lease ${last.start}..${last.exp}`);
      }
    }
    t.same(first(attemptErrors), [], 'attempts go 1, 2, 3… in hand-out order and the table agrees');
    t.same(
      first(completionErrors),
      [],
      "each job was completed by its last lease, before that lease's expiry",
    );
    t.ok(redelivered > 0, `kills left leases to run out: ${redelivered} jobs were handed out again`);

    // The workers' claims are the database's grants, as the workers saw them.
    const claimedLines = lines.filter((l) => l.e === 'claimed');
    const claimErrors: string[] = [];
    const logIntervals: Interval[] = [];
    for (const l of claimedLines) {
      const g = grantByLease.get(l.lease!);
      if (!g || g.job !== l.id || g.attempt !== l.attempt || Math.abs(g.exp - l.exp!) > 1.5) {
        claimErrors.push(
          `${l.w}: job ${l.id} lease ${l.lease} attempt ${l.attempt} exp ${l.exp}: not granted so`,
        );
        continue;
      }
      logIntervals.push({
        job: l.id!,
        lease: l.lease!,
        start: l.exp! - l.L! * 1000,
        end: endOf(l.id!, l.lease!, l.exp!),
      });
    }
    t.same(first(claimErrors), [], `each of the ${claimedLines.length} claims a worker saw was granted so`);
    t.comment(
      `${grants.length} leases granted, ${claimedLines.length} seen by a worker (${grants.length - claimedLines.length} answers lost to kills)`,
    );

    // Never two live leases on one job (from the audit: all grants; from the workers' lines: theirs).
    const byJob = (ivs: Interval[]) => {
      const m = new Map<string, Interval[]>();
      for (const iv of ivs) m.set(iv.job, [...(m.get(iv.job) ?? []), iv]);
      return [...m.values()];
    };
    t.same(
      first(byJob(auditIntervals).flatMap(overlaps)),
      [],
      'no job held by two live leases at once (audit)',
    );
    t.same(
      first(byJob(logIntervals).flatMap(overlaps)),
      [],
      "no job held by two live leases at once (workers' lines)",
    );

    // Groups: one live lease per group at a time, and each group's jobs first handed out in id order.
    const groupErrors: string[] = [];
    for (let g = 0; g < GROUPS; g++) {
      const ivs = auditIntervals.filter((iv) => jobById.get(iv.job)!.group_key === `g${g}`);
      groupErrors.push(...overlaps(ivs).map((s) => `g${g}: ${s}`));
      const firstOut = [...new Set([...ivs].sort((a, b) => a.start - b.start).map((iv) => iv.job))];
      const byId = [...firstOut].sort((a, b) => Number(a) - Number(b));
      if (firstOut.join() !== byId.join()) groupErrors.push(`g${g}: handed out as ${firstOut.join(',')}`);
    }
    t.same(first(groupErrors), [], 'a group never had two live leases at once, and went in enqueue order');
    t.equal(groupOverlaps, 0, 'the watcher never saw two live leases in a group');

    // The limit: never more than LIMIT live leases in the limited queue.
    const limitedPeakAudit = peak(auditIntervals.filter((iv) => jobById.get(iv.job)!.queue === Q.limited));
    t.ok(
      limitedPeakAudit <= LIMIT,
      `at most ${LIMIT} live leases in the limited queue (audit peak ${limitedPeakAudit})`,
    );
    t.ok(limitedPeak <= LIMIT && limitedPeak > 0, `and as the watcher saw it (peak ${limitedPeak})`);

    // Acks: the completing lease's ack is the only one answered 204; every other answer is a 409.
    const ackErrors: string[] = [];
    let unknownOutcome = 0;
    const acksByJob = new Map<string, Line[]>();
    for (const l of lines)
      if (l.e === 'ack' || l.e === 'acked') acksByJob.set(l.id!, [...(acksByJob.get(l.id!) ?? []), l]);
    for (const j of jobs) {
      const ls = acksByJob.get(j.id) ?? [];
      const ok = ls.filter((l) => l.e === 'acked' && l.status === 204);
      if (ok.length > 1 || ok.some((l) => l.lease !== j.done_lease)) {
        ackErrors.push(
          `job ${j.id}: 204 for ${ok.map((l) => `${l.w}/${l.lease}`).join(', ')}; completed by ${j.done_lease}`,
        );
      }
      for (const l of ls) {
        if (l.e === 'acked' && l.status !== 204 && l.status !== 409)
          ackErrors.push(`job ${j.id}: ack answered ${l.status}`);
      }
      if (!ls.some((l) => l.e === 'ack' && l.lease === j.done_lease)) {
        ackErrors.push(`job ${j.id}: no worker sent the ack of its completing lease ${j.done_lease}`);
      }
      if (ok.length === 0) unknownOutcome++;
    }
    t.same(
      first(ackErrors),
      [],
      'each job acked successfully once, by the lease that completed it; other acks 409',
    );
    t.comment(
      `${unknownOutcome} completing acks were sent by a worker killed before it read the answer; ` +
        `${lines.filter((l) => l.e === 'ack503').length} acks answered 503 and sent again, ` +
        `${lines.filter((l) => l.e === 'neterr').length} requests failed on the network (a killed replica)`,
    );

    // The faults happened.
    t.ok(
      kills.claim > 0 && kills.claimed > 0 && kills.ack > 0,
      `workers killed mid-claim, mid-work and mid-ack ${JSON.stringify(kills)}`,
    );
    t.ok(replicaRestarted, 'a replica was SIGKILLed and restarted');
    t.same(
      staleResults.map((r) => [r.queue, r.status]),
      staleCases.map((q) => [q, 409]),
      'every frozen worker got 409',
    );
    t.comment(`the whole test took ${Date.now() - started} ms`);
  },
);
