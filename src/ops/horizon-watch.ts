/**
 * Horizon-stall warnings. A writing transaction held open anywhere in the cluster keeps the
 * transaction horizon back, and delivery pauses behind it (never drops: see the tailer). The tailer
 * measures how long committed rows have waited (`horizonStallMs`); once that passes `warnAfterMs`,
 * this logs one warning naming the backend that holds the horizon (pid, application_name,
 * transaction age, from pg_stat_activity), then one more every `warnAfterMs` while it lasts, and an
 * info line when delivery resumes.
 *
 * Lifecycle: started by the server once the feed runs, stopped by its close(); a 1 s unref'd
 * interval in between. It queries the database only while a stall is past the threshold; a failed
 * query is logged without a blocker.
 */
import type { Kysely } from 'kysely';
import type { Database } from '../db/database.ts';
import type { Feed } from '../feed/feed.ts';
import { horizonBlocker } from '../feed/queries/horizon-blocker.ts';

export interface HorizonWatchLog {
  warn(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
}

/** Starts the watcher; call the returned function to stop it. */
export function watchHorizon(
  deps: { db: Kysely<Database>; feed: Feed; log: HorizonWatchLog },
  warnAfterMs = 5000,
): () => void {
  const { log } = deps;
  let nextWarnAt = warnAfterMs;
  let warned = false;
  let checking = false;
  const timer = setInterval(() => {
    const stall = deps.feed.tailer.horizonStallMs;
    if (stall === 0) {
      if (warned) log.info({}, 'horizon stall over: delivery resumed');
      warned = false;
      nextWarnAt = warnAfterMs;
      return;
    }
    if (stall < nextWarnAt || checking) return;
    checking = true;
    nextWarnAt = stall + warnAfterMs;
    horizonBlocker(deps.db)
      .catch(() => undefined)
      .then((b) => {
        warned = true;
        log.warn(
          {
            stalledMs: stall,
            blocker: b && {
              pid: b.pid,
              applicationName: b.applicationName,
              transactionAgeS: Math.round(b.ageSeconds),
            },
          },
          'delivery paused: an open writing transaction holds the horizon back (events are delivered once it ends; ' +
            'end or cancel that backend if it is stuck, e.g. select pg_cancel_backend(pid))',
        );
      })
      .finally(() => {
        checking = false;
      });
  }, 1000);
  timer.unref();
  return () => clearInterval(timer);
}
