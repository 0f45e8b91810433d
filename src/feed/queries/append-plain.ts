/**
 * commitfeed.append_plain (src/sql/append-plain.sql): the append of events without keys (nothing to
 * deduplicate), answering in one row: the transaction id, the ids in input order, the rows' time.
 * Mercure updates (events with a `lookup`) go through it too, with their ids and topics.
 */
import { CompiledQuery } from 'kysely';
import { columns } from '../../db/columns.ts';
import type { Db } from '../../db/database.ts';
import { prepared } from '../../db/prepared.ts';
import { type CheckedEventInput, FIELD_NAMES } from '../event.ts';
import type { ClearProbe } from '../cleared.ts';
import type { OwnWrites } from '../own-writes.ts';
import { type AppendResult, expectOnePerEvent } from './append.ts';
import { arrayArgs } from './event-columns.ts';

/** Every field but the key. */
const PLAIN_FIELDS = FIELD_NAMES.filter((f) => f !== 'key');
const n = PLAIN_FIELDS.length;

const APPEND_PLAIN_CALL = `commitfeed.append_plain(${arrayArgs(PLAIN_FIELDS)}, $${n + 1}::text[], $${n + 2}::text[], $${n + 3}::text[], $${n + 4}::int[])`;
const APPEND_PLAIN_SQL = prepared(`select tx, ids, ms from ${APPEND_PLAIN_CALL}`);
/** The same, asking commitfeed.tail_clear (src/sql/tail-clear.sql) in the same statement, after the
 * insert: whether the feed may hold something before these rows that the tailer lacks (ClearProbe). */
const APPEND_PLAIN_CLEAR_SQL = prepared(
  `select a.tx, a.ids, a.ms, array_to_string(commitfeed.tail_clear(a.tx::xid8, $${n + 5}::xid8, $${n + 6}::int8, $${n + 7}::xid8[], $${n + 8}::timestamptz, $${n + 9}::interval), ',') as needs from ${APPEND_PLAIN_CALL} a`,
);

const NO_LOOKUPS = [null, null, null, null];

/** The `mids`, `topics`, `alt_topics` and `alt_of` arguments: null when no event is a Mercure update. */
function lookupParams(events: readonly CheckedEventInput[]): unknown[] {
  if (!events.some((e) => e.lookup !== undefined)) return NO_LOOKUPS;
  const mids: (string | null)[] = new Array(events.length);
  const topics: (string | null)[] = new Array(events.length);
  const alternates: string[] = [];
  const alternateOf: number[] = [];
  for (let i = 0; i < events.length; i++) {
    const l = events[i].lookup;
    mids[i] = l?.mid ?? null;
    topics[i] = l?.topics[0] ?? null;
    if (l === undefined) continue;
    for (let j = 1; j < l.topics.length; j++) {
      alternates.push(l.topics[j]);
      alternateOf.push(i + 1);
    }
  }
  return alternates.length === 0 ? [mids, topics, null, null] : [mids, topics, alternates, alternateOf];
}

/**
 * `own`: only for a statement that commits by itself (the group commit's, not a caller's
 * transaction): its events are recorded for the tailer once it has committed (see own-writes.ts).
 * `probe`: the tailer's question (only with `own`); the answer is set on it (`answer`) when the
 * events were held.
 */
export async function appendPlain(
  db: Db,
  events: readonly CheckedEventInput[],
  own: OwnWrites | undefined,
  probe?: ClearProbe,
): Promise<AppendResult[]> {
  const params = [...columns(events, PLAIN_FIELDS), ...lookupParams(events)];
  const { rows } = await db.executeQuery<{ tx: string; ids: string; ms: number; needs?: string | null }>(
    probe === undefined
      ? CompiledQuery.raw(APPEND_PLAIN_SQL, params)
      : CompiledQuery.raw(APPEND_PLAIN_CLEAR_SQL, [
          ...params,
          String(probe.after.txid),
          probe.after.id,
          probe.txids,
          ...probe.floor,
        ]),
  );
  const texts = rows[0]?.ids.split(',') ?? [];
  expectOnePerEvent('commitfeed.append_plain', texts.length, events);
  const { tx, ms, needs } = rows[0];
  const ids = texts.map(Number);
  const held = own?.record(tx, ids, events, ms) === true;
  // Only held events can be handed on from memory (cleared.ts); others are read from the table.
  if (probe !== undefined && held && typeof needs === 'string') {
    const to = { txid: Number(tx), id: ids[ids.length - 1] };
    probe.answer = { needs: needs === '' ? [] : needs.split(',').map(Number), to };
  }
  const prefix = `${tx}-`;
  return texts.map((id, i) => ({ id: prefix + id, stream: events[i].stream, duplicate: false }));
}
