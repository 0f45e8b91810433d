/**
 * The group commit's write: appendEvents() (append.ts) for events already checked in TypeScript,
 * through commitfeed.append_unchecked (src/sql/append-unchecked.sql), which is commitfeed.append
 * without its restatement of those checks (a quarter to a third of its work), or, when no event has
 * a key, commitfeed.append_plain (append-plain.ts), which also writes Mercure updates.
 */
import { CompiledQuery } from 'kysely';
import { type Db, inTransaction } from '../../db/database.ts';
import { prepared } from '../../db/prepared.ts';
import { type CheckedEventInput, FIELD_NAMES } from '../event.ts';
import type { ClearProbe } from '../cleared.ts';
import type { OwnWrites } from '../own-writes.ts';
import { type AppendResult, appendParams, appendResults } from './append.ts';
import { appendPlain } from './append-plain.ts';
import { arrayArgs } from './event-columns.ts';

/** commitfeed.append's statement without the input checks, for events toEventInput() accepted. */
const APPEND_UNCHECKED_SQL = prepared(
  `select cursor, duplicate from commitfeed.append_unchecked(${arrayArgs(FIELD_NAMES)})`,
);

/**
 * appendEvents() for events already checked (the type says toEventInput() or the Mercure hub made
 * them). `own`: only for a statement that commits by itself (the group commit's, not a caller's
 * transaction): a keyless group's events are recorded for the tailer once it has committed (see
 * own-writes.ts), and `probe` asked of the feed in the same statement (ClearProbe; keyed groups
 * leave it unanswered).
 */
export async function appendCheckedEvents(
  db: Db,
  events: readonly CheckedEventInput[],
  own?: OwnWrites,
  probe?: ClearProbe,
): Promise<AppendResult[]> {
  if (events.length === 0) return [];
  if (events.every((e) => e.key === null)) return appendPlain(db, events, own, probe);
  if (events.some((e) => e.lookup !== undefined)) return appendSplit(db, events);
  const { rows } = await db.executeQuery<{ cursor: string; duplicate: boolean }>(
    CompiledQuery.raw(APPEND_UNCHECKED_SQL, appendParams(events)),
  );
  return appendResults(events, rows);
}

/**
 * A group with keys and Mercure updates: append_unchecked writes no lookups, so the updates go in a
 * plain statement of their own beside it, both in one transaction (the group commit retries a failed
 * group in halves: nothing of it may have been written). Not held: `own` records only statements
 * that committed by themselves; these rows come from the table. Rare: it takes a keyed publish and a
 * Mercure update in one group.
 */
function appendSplit(db: Db, events: readonly CheckedEventInput[]): Promise<AppendResult[]> {
  const updates = events.filter((e) => e.lookup !== undefined);
  const rest = events.filter((e) => e.lookup === undefined);
  return inTransaction(db, async (trx) => {
    const a = await appendPlain(trx, updates, undefined);
    const b = await appendCheckedEvents(trx, rest);
    let i = 0;
    let j = 0;
    return events.map((e) => (e.lookup !== undefined ? a[i++] : b[j++]));
  });
}
