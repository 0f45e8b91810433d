/**
 * The enqueue group commit's write, with hand-off: a job due now, outside ordered groups, for a
 * queue on which claims of this process are waiting, is leased to the oldest of them by the
 * enqueue statement itself (commitfeed.enqueue_jobs_unchecked `leases`), and handed to it after
 * the commit, so the job reaches the worker without a claim statement (one statement, one commit
 * less between enqueue and handler). The statement leases only where a claim would hand out now
 * (not paused, no concurrency limit, not a duplicate); a reserved claim that got nothing claims
 * again at once, and one whose client has gone meanwhile gives its jobs back (`unlease`). If the
 * write fails, every reserved claim goes back to claiming; nothing was leased.
 */
import type { Db } from '../db/database.ts';
import type { ClaimedJob } from './claim.ts';
import { type CheckedJobInput, type EnqueueOutcome, enqueueCheckedJobs } from './enqueue.ts';
import type { Waiter, Wakeups } from './wakeups.ts';

/** Claims reserved for an enqueue: the lease (seconds) each job is written with, and its claim. */
interface Reservation {
  leases: (number | null)[];
  owner: (Waiter | undefined)[];
  reserved: Waiter[];
}

/** Enqueues `jobs` (the group commit's write), leasing what it can to claims waiting in `wakeups`. */
export async function enqueueHandingOff(
  db: Db,
  jobs: readonly CheckedJobInput[],
  wakeups: Wakeups,
): Promise<EnqueueOutcome[]> {
  const r = reserve(jobs, wakeups);
  if (r.reserved.length === 0) return enqueueCheckedJobs(db, jobs);
  let results: EnqueueOutcome[];
  try {
    results = await enqueueCheckedJobs(db, jobs, r.leases);
  } catch (err) {
    for (const w of r.reserved) wakeups.release(w);
    throw err;
  }
  handOut(jobs, results, r, wakeups);
  return results;
}

/** Takes waiting claims out of the wait for the jobs that may be handed off, oldest claim first. */
function reserve(jobs: readonly CheckedJobInput[], wakeups: Wakeups): Reservation {
  const leases: (number | null)[] = new Array(jobs.length).fill(null);
  const owner: (Waiter | undefined)[] = new Array(jobs.length);
  const reserved: Waiter[] = [];
  const eligible = new Map<string, number[]>();
  for (let i = 0; i < jobs.length; i++) {
    const j = jobs[i];
    if (j.group !== null || j.delay !== 0 || j.runAt !== null) continue;
    const list = eligible.get(j.queue);
    if (list) list.push(i);
    else eligible.set(j.queue, [i]);
  }
  for (const [queue, idx] of eligible) {
    let k = 0;
    for (const w of wakeups.reserve(queue, idx.length)) {
      reserved.push(w);
      for (let n = 0; n < w.max && k < idx.length; n++, k++) {
        leases[idx[k]] = w.leaseSeconds;
        owner[idx[k]] = w;
      }
    }
  }
  return { leases, owner, reserved };
}

/** After the commit: each reserved claim gets the jobs the statement leased to it, or claims again. */
function handOut(
  jobs: readonly CheckedJobInput[],
  results: readonly EnqueueOutcome[],
  { owner, reserved }: Reservation,
  wakeups: Wakeups,
): void {
  const handed = new Map<Waiter, ClaimedJob[]>();
  for (let i = 0; i < jobs.length; i++) {
    const h = results[i].handedOff;
    const w = owner[i];
    if (!h || !w) continue;
    const job: ClaimedJob = {
      id: results[i].id,
      payload: jobs[i].payload,
      attempt: 1,
      maxAttempts: jobs[i].maxAttempts,
      lease: h.lease,
      leaseExpiresAt: h.leaseExpiresAt,
    };
    const list = handed.get(w);
    if (list) list.push(job);
    else handed.set(w, [job]);
  }
  for (const w of reserved) {
    const got = handed.get(w);
    if (got) wakeups.handOff(w, got);
    else wakeups.release(w);
  }
}
