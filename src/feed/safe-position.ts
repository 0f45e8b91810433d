/**
 * A position after every event committed before the call and not past the horizon: where a `latest`
 * reader starts (it must not receive what was acknowledged before it connected, nor miss what commits
 * after), and how far a read-your-writes read must reach. Undefined when no such position can be had
 * within `maxMs` (a transaction holding the horizon back behind committed rows): the caller answers 503
 * rather than start in the past.
 *
 * The tailer's position itself when it is caught up (Tailer.caughtUp: the last read started after
 * every local commit and found nothing waiting behind the horizon, and no commit of this process waits
 * to be handed on); otherwise the horizon read in one statement with the check that no committed row is
 * past it (queries/start-position.ts), so a tailer that is merely behind costs one query, not a wait.
 * A position past the tail is fine for a subscriber: the hub skips events at or before its cursor.
 */
import type { Db } from '../db/database.ts';
import { type Cursor, maxCursor } from './cursor.ts';
import { readStartPosition } from './queries/start-position.ts';

export async function safePosition(
  tail: { readonly caughtUp: boolean; readonly position: Cursor },
  db: Db,
  maxMs: number,
): Promise<Cursor | undefined> {
  if (tail.caughtUp) return tail.position;
  const deadline = Date.now() + maxMs;
  for (let pause = 5; ; pause = Math.min(pause * 2, 100)) {
    const { horizon, waiting } = await readStartPosition(db);
    if (!waiting) return maxCursor(tail.position, horizon);
    const left = deadline - Date.now();
    if (left <= 0) return undefined;
    await new Promise((r) => setTimeout(r, Math.min(pause, left)));
  }
}
