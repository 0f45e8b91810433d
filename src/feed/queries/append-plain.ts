/**
 * commitfeed.append_plain (src/sql/append-plain.sql): the append of events without keys (nothing to
 * deduplicate), answering in one row: the transaction id, the ids in input order, the rows' time.
 */
import { CompiledQuery } from 'kysely';
import { columns } from '../../db/columns.ts';
import type { Db } from '../../db/database.ts';
import { prepared } from '../../db/prepared.ts';
import { type CheckedEventInput, FIELD_NAMES } from '../event.ts';
import type { OwnWrites } from '../own-writes.ts';
import { type AppendResult, expectOnePerEvent } from './append.ts';
import { arrayArgs } from './event-columns.ts';

/** Every field but the key. */
const PLAIN_FIELDS = FIELD_NAMES.filter((f) => f !== 'key');

const APPEND_PLAIN_SQL = prepared(
  `select tx, ids, ms from commitfeed.append_plain(${arrayArgs(PLAIN_FIELDS)})`,
);

/**
 * `own`: only for a statement that commits by itself (the group commit's, not a caller's
 * transaction): its events are recorded for the tailer once it has committed (see own-writes.ts).
 */
export async function appendPlain(
  db: Db,
  events: readonly CheckedEventInput[],
  own: OwnWrites | undefined,
): Promise<AppendResult[]> {
  const { rows } = await db.executeQuery<{ tx: string; ids: string; ms: number }>(
    CompiledQuery.raw(APPEND_PLAIN_SQL, columns(events, PLAIN_FIELDS)),
  );
  const texts = rows[0]?.ids.split(',') ?? [];
  expectOnePerEvent('commitfeed.append_plain', texts.length, events);
  const { tx, ms } = rows[0];
  own?.record(tx, texts.map(Number), events, ms);
  const prefix = `${tx}-`;
  return texts.map((id, i) => ({ id: prefix + id, stream: events[i].stream, duplicate: false }));
}
