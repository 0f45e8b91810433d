/**
 * The ids the hub generates (draft-08 §Publication: an IRI; "a fragment is convenient to return an
 * offset or a sequence that is unique for this hub"): a `urn:uuid:` whose UUID is version 8 (RFC 9562,
 * custom layout) and carries the update's position in the feed, its transaction id (60 bits) and its
 * row id (62 bits). Resuming from such an id goes straight to that row (txid, id), so an update with a
 * generated id needs no entry in the id index (feed_mid_idx) and its row stores no id at all: about a
 * fifth of an update's PostgreSQL instructions in a group commit (bench/RESULTS.md, "Mercure publish
 * cost", change 3). Ids the publisher gives are kept as given, in the `mid` column and its index.
 *
 * Layout, hex digits: TTTTTTTT-TTTT-8TTT-VIII-IIIIIIIIIIII, T the txid's 60 bits (15 digits), 8 the
 * version, then the variant bits 10 and the row id's 62 bits. The same text as
 * commitfeed.mercure_position_id (src/sql/mercure-append.sql) makes in SQL: a generated id is known
 * from the row's position alone, whichever side wrote it.
 */

const ID_BITS = 62n;
const TX_BITS = 60n;
const VARIANT = 2n << ID_BITS;
const POSITION_ID =
  /^urn:uuid:([0-9a-f]{8})-([0-9a-f]{4})-8([0-9a-f]{3})-([89ab][0-9a-f]{3})-([0-9a-f]{12})$/;

/**
 * The generated id of the update at (txid, id). Both fit for the life of any database (2^60
 * transactions, 2^62 rows: over 100,000 years at a million a second); beyond, it throws rather than
 * mint an id that would name another row.
 */
export function positionId(txid: number | bigint | string, id: number | bigint | string): string {
  const t = BigInt(txid);
  const i = BigInt(id);
  if (t < 0n || t >= 1n << TX_BITS || i < 0n || i >= 1n << ID_BITS) {
    throw new Error(`no generated Mercure id for position ${t}-${i}: out of range`);
  }
  const tx = t.toString(16).padStart(15, '0');
  const row = (VARIANT | i).toString(16);
  return `urn:uuid:${tx.slice(0, 8)}-${tx.slice(8, 12)}-8${tx.slice(12)}-${row.slice(0, 4)}-${row.slice(4)}`;
}

/** The position a generated id names (exact texts only: as positionId writes them), else undefined. */
export function positionOfId(mid: string): { txid: string; id: string } | undefined {
  const m = POSITION_ID.exec(mid);
  if (m === null) return undefined;
  const txid = BigInt(`0x${m[1]}${m[2]}${m[3]}`);
  const id = BigInt(`0x${m[4]}${m[5]}`) & ((1n << ID_BITS) - 1n);
  return { txid: txid.toString(), id: id.toString() };
}
