/**
 * The group commit's write: appendEvents() (append.ts) for events already checked in TypeScript,
 * through commitfeed.append_unchecked (src/sql/append-unchecked.sql), which is commitfeed.append
 * without its restatement of those checks (a quarter to a third of its work), or, when no event has
 * a key, commitfeed.append_plain (append-plain.ts).
 */
import { CompiledQuery } from 'kysely';
import type { Db } from '../../db/database.ts';
import { prepared } from '../../db/prepared.ts';
import { type CheckedEventInput, FIELD_NAMES } from '../event.ts';
import type { OwnWrites } from '../own-writes.ts';
import { type AppendResult, appendParams, appendResults } from './append.ts';
import { appendPlain } from './append-plain.ts';
import { arrayArgs } from './event-columns.ts';

/** commitfeed.append's statement without the input checks, for events toEventInput() accepted. */
const APPEND_UNCHECKED_SQL = prepared(
  `select cursor, duplicate from commitfeed.append_unchecked(${arrayArgs(FIELD_NAMES)})`,
);

/**
 * appendEvents() for events already checked (the type says toEventInput() made them). `own`: only
 * for a statement that commits by itself (the group commit's, not a caller's transaction): a keyless
 * group's events are recorded for the tailer once it has committed (see own-writes.ts).
 */
export async function appendCheckedEvents(
  db: Db,
  events: readonly CheckedEventInput[],
  own?: OwnWrites,
): Promise<AppendResult[]> {
  if (events.length === 0) return [];
  if (events.every((e) => e.key === null)) return appendPlain(db, events, own);
  const { rows } = await db.executeQuery<{ cursor: string; duplicate: boolean }>(
    CompiledQuery.raw(APPEND_UNCHECKED_SQL, appendParams(events)),
  );
  return appendResults(events, rows);
}
