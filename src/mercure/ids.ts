/**
 * The ids the hub generates for HTTP publishes: the update's position in the feed (its transaction id,
 * 60 bits, and row id, 62 bits), encrypted under the database's key (commitfeed.mercure_id_key,
 * migrations/0010_mercure_id_key.ts) into the 122 random bits of a version-4 `urn:uuid:`. Resuming
 * from such an id decrypts it and goes straight to that row, so an update with a generated id needs
 * no entry in the id index (feed_mid_idx) and its row stores no id at all: about a fifth of an
 * update's PostgreSQL instructions in a group commit (bench/HISTORY.md, "Mercure publish cost", change 3).
 *
 * Encrypted, not plain: ids are cursors shown to subscribers (the discovery Link, the
 * Mercure-Last-Event-ID field), and the draft (§Reconnection, §Security) asks that they disclose
 * nothing about order or timing, naming "an encrypted form of an internal ordered identifier" as one
 * way. The cipher is a 4-round Feistel network (Luby-Rackoff) over two 61-bit halves whose round
 * function is AES-128 of (round, half) under a key derived from the database's: a keyed permutation of
 * the 122 bits, so ids are unique and look like random UUIDv4s. AES through one long-lived ECB cipher
 * (one block per call): ~3 µs an id, where HMAC-SHA256 rounds cost ~27 µs (an HMAC object per round).
 *
 * Ids the publisher gives, and the ids commitfeed.mercure_append (SQL) generates (random UUIDv4s),
 * stay in the `mid` column and its index. Any UUIDv4 decrypts to some position, so a lookup takes a
 * decrypted position only where that row is an update stored without an id (findUpdateId).
 */
import { type Cipher, createCipheriv, createHash } from 'node:crypto';

const HALF = 61n;
const M61 = (1n << HALF) - 1n;
const M62 = (1n << 62n) - 1n;
const ROUNDS = 4;
const V4 = /^urn:uuid:([0-9a-f]{8})-([0-9a-f]{4})-4([0-9a-f]{3})-([89ab][0-9a-f]{3})-([0-9a-f]{12})$/;

export class MercureIds {
  private readonly aes: Cipher;
  private readonly block = Buffer.alloc(16);

  /** `key`: the database's (loadMercureIds in queries.ts), at least 16 bytes. */
  constructor(key: Buffer) {
    if (key.length < 16) throw new Error('the Mercure id key is too short');
    const k = createHash('sha256').update('commitfeed mercure ids').update(key).digest().subarray(0, 16);
    this.aes = createCipheriv('aes-128-ecb', k, null).setAutoPadding(false);
  }

  /** The round function: AES of the block (round, 0…, x), its first 61 bits. ECB: blocks are
   * independent, so one cipher serves every call (16 bytes in, 16 out). */
  private round(k: number, x: bigint): bigint {
    this.block[0] = k;
    this.block.writeBigUInt64BE(x, 8);
    return this.aes.update(this.block).readBigUInt64BE(0) & M61;
  }

  /**
   * The generated id of the update at (txid, id). Both fit for the life of any database (2^60
   * transactions, 2^62 rows: over 100,000 years at a million a second); beyond, it throws rather
   * than mint an id that would name another row.
   */
  idOf(txid: number | bigint | string, id: number | bigint | string): string {
    const t = BigInt(txid);
    const i = BigInt(id);
    if (t < 0n || t >= 1n << 60n || i < 0n || i > M62) {
      throw new Error(`no generated Mercure id for position ${t}-${i}: out of range`);
    }
    const p = (t << 62n) | i;
    let l = p >> HALF;
    let r = p & M61;
    for (let k = 0; k < ROUNDS; k++) [l, r] = [r, l ^ this.round(k, r)];
    const c = (l << HALF) | r;
    const a = (c >> 74n).toString(16).padStart(12, '0');
    const b = ((c >> 62n) & 0xfffn).toString(16).padStart(3, '0');
    const d = ((2n << 62n) | (c & M62)).toString(16);
    return `urn:uuid:${a.slice(0, 8)}-${a.slice(8)}-4${b}-${d.slice(0, 4)}-${d.slice(4)}`;
  }

  /** The position a UUIDv4 (lowercase, as idOf writes it) would be the generated id of, else undefined. */
  positionOf(mid: string): { txid: string; id: string } | undefined {
    const m = V4.exec(mid);
    if (m === null) return undefined;
    const c = (BigInt(`0x${m[1]}${m[2]}${m[3]}`) << 62n) | (BigInt(`0x${m[4]}${m[5]}`) & M62);
    let l = c >> HALF;
    let r = c & M61;
    for (let k = ROUNDS - 1; k >= 0; k--) [l, r] = [r ^ this.round(k, l), l];
    const p = (l << HALF) | r;
    return { txid: (p >> 62n).toString(), id: (p & M62).toString() };
  }
}
