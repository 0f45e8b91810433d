/**
 * The kernel's send queue of each socket, read from Linux's /proc/net/tcp and /proc/net/tcp6: the
 * bytes written to a socket and not yet acknowledged by its peer (the `tx_queue` column). Node
 * cannot cap a TCP socket's send buffer (SO_SNDBUF needs a native addon) nor ask for its queue, and
 * a client that stops reading pins up to the kernel's autotuned buffer (`net.ipv4.tcp_wmem`'s
 * maximum, 4 MiB by default; ~424 KiB measured per stalled SSE socket here): slow-readers.ts reads
 * these queues to count and bound that cost.
 *
 * Sockets are matched by inode (`/proc/self/fd/N` names it), read once per socket. The tables list
 * every socket of the network namespace, TIME_WAIT ones included, and the kernel walks its whole
 * connection hash for each read (~2 ms of CPU measured here, whatever the count): the sweep reads
 * them only while SSE connections exist, and measures its cost (`commitfeed_sse_sweep_seconds_total`).
 * Lines with an empty queue are skipped on one fixed-offset comparison.
 *
 * Lifecycle: stateless reads. Where the tables cannot be read (not Linux, /proc not mounted), the
 * first failure turns them off for the process: kernel queues count as 0 and only Node's buffers
 * are bounded (the warning says so once).
 */
import { readlinkSync } from 'node:fs';
import { open } from 'node:fs/promises';

/** The inode of the socket open as file descriptor `fd` in this process; 0 when unknown. */
export function socketInode(fd: number | undefined): number {
  if (fd === undefined || fd < 0 || process.platform !== 'linux') return 0;
  try {
    const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/self/fd/${fd}`));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

const EMPTY = '00000000';

/**
 * Adds to `into` (inode → bytes) each socket of `table` (the text of /proc/net/tcp or tcp6) whose
 * send queue is not empty. The kernel prints each line as
 * `sl: local:port remote:port st tx_queue:rx_queue tr:when retrnsmt uid timeout inode ...`, the
 * addresses as 8 (IPv4) or 32 (IPv6) hex digits: tx_queue sits at a fixed offset from the first
 * colon; only the few lines with a queue are split.
 */
export function parseSendQueues(table: string, into: Map<number, number>): void {
  let pos = table.indexOf('\n') + 1; // the header
  while (pos > 0 && pos < table.length) {
    const next = table.indexOf('\n', pos);
    const end = next === -1 ? table.length : next;
    const colon = table.indexOf(':', pos);
    const addr = table.indexOf(':', colon + 2) - (colon + 2); // 8 or 32 hex digits
    const tx = colon + 2 + 2 * (addr + 6) + 3;
    if (colon > 0 && colon < end && tx + 8 <= end && table.slice(tx, tx + 8) !== EMPTY) {
      const fields = table.slice(tx, end).trim().split(/\s+/);
      const queue = Number.parseInt(fields[0] ?? '', 16);
      const inode = Number(fields[5]);
      if (queue > 0 && inode > 0) into.set(inode, queue);
    }
    pos = next + 1;
  }
}

export class SendQueues {
  /** False once the tables could not be read (see the header). */
  available = process.platform === 'linux';
  /** One buffer for every read, grown to the largest table seen. */
  private buffer = Buffer.allocUnsafe(1024 * 1024);

  constructor(private readonly log: { warn(obj: object, msg?: string): void }) {}

  /** The non-empty send queues by inode; IPv6 sockets' table only when `ipv6` (one file less). */
  async read(ipv6: boolean): Promise<Map<number, number> | undefined> {
    if (!this.available) return undefined;
    try {
      const queues = new Map<number, number>();
      parseSendQueues(await this.table('/proc/net/tcp'), queues);
      if (ipv6) parseSendQueues(await this.table('/proc/net/tcp6'), queues);
      return queues;
    } catch (err) {
      this.available = false;
      this.log.warn(
        { err: (err as Error).message },
        "cannot read the kernel's socket tables (/proc/net/tcp): SSE bytes in flight count only what Node holds; lower net.ipv4.tcp_wmem to bound the kernel's share (docs/operations.md#slow-readers)",
      );
      return undefined;
    }
  }

  // The kernel fills a read as far as the buffer goes, so a table comes in one read on the thread
  // pool (readFile asks for 64 KiB at a time: a turn of a busy event loop between each, seconds in
  // all for 2,000 sockets on a loaded machine).
  private async table(path: string): Promise<string> {
    const file = await open(path, 'r');
    try {
      let n = 0;
      for (;;) {
        if (n === this.buffer.length) {
          const bigger = Buffer.allocUnsafe(this.buffer.length * 2);
          this.buffer.copy(bigger, 0, 0, n);
          this.buffer = bigger;
        }
        const { bytesRead } = await file.read(this.buffer, n, this.buffer.length - n, null);
        if (bytesRead === 0) return this.buffer.toString('latin1', 0, n);
        n += bytesRead;
      }
    } finally {
      await file.close();
    }
  }
}
