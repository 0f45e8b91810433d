/**
 * The LISTEN connection: one dedicated `pg.Client` per process (not from the pool, which would hand
 * it back and lose the LISTEN), subscribed to the feed channel. Each notification wakes the tailer,
 * except those sent by this process's own pool connections: every write path here pokes the tailer
 * itself after its commit (batcher onCommit, /v1/tx, queue operations), so acting on its own echo
 * would cost a second, empty tail read per commit.
 *
 * Lifecycle: `start()` connects and LISTENs; on any error or end it reconnects with exponential
 * backoff (100 ms to 5 s) and wakes the tailer after every reconnect, because notifications sent
 * while it was away are lost. That only costs latency: the notify is a hint, the feed is the truth,
 * and the tailer's fallback poll keeps delivering meanwhile. `connected` feeds /readyz.
 * A self-check marker's NOTIFY (marker.ts) is handed to the self-check when it is this process's own,
 * and wakes nothing when it is another process's.
 */
import pg from 'pg';
import { MARKER_PREFIX } from './marker.ts';

/** The one channel every feed write notifies (payload empty: the feed, not the notify, is the truth). */
export const FEED_CHANNEL = 'commitfeed_feed';

export interface ListenerOptions {
  url: string;
  onNotify(): void;
  /** Backend pids of this process's own pool: their commits already poke the tailer directly, so
   * their notifications would only cause a second, empty read. */
  ownSessions?: ReadonlySet<number>;
  log: { warn(obj: object, msg?: string): void; info(obj: object, msg?: string): void };
}

export class Listener {
  private client: pg.Client | undefined;
  private stopped = false;
  private backoffMs = 0;
  private timer: NodeJS.Timeout | undefined;
  connected = false;
  /** Backend pid of the LISTEN connection (tests terminate it). */
  pid: number | undefined;
  /** notifications: heard; own: of those, sent by this process's own sessions (not acted on);
   * foreignMarkers: other processes' self-check markers (not acted on). */
  readonly stats = { notifications: 0, own: 0, foreignMarkers: 0, reconnects: 0 };
  /** This process's markers: their payloads' start, and who hears them (see hearMarkers). */
  private markers: { prefix: string; heard(payload: string): void } | undefined;

  constructor(private readonly opts: ListenerOptions) {}

  async start(): Promise<void> {
    this.stopped = false;
    await this.connect();
  }

  private async connect(): Promise<void> {
    const client = new pg.Client({ connectionString: this.opts.url, application_name: 'commitfeed-listen' });
    this.client = client;
    let failed = false;
    const onFail = (err?: Error) => {
      if (failed) return;
      failed = true;
      this.connected = false;
      client.removeAllListeners('notification');
      // keep an error listener: a late socket error must not crash the process
      client.on('error', () => {});
      void client.end().catch(() => {});
      if (!this.stopped) {
        this.opts.log.warn(
          { err: err?.message ?? 'connection ended' },
          'LISTEN connection lost; reconnecting',
        );
        this.retry();
      }
    };
    client.on('error', onFail);
    client.on('end', () => onFail());
    client.on('notification', (msg) => {
      this.stats.notifications++;
      if (msg.payload?.startsWith(MARKER_PREFIX) && this.foreignMarker(msg.payload)) return;
      if (this.opts.ownSessions?.has(msg.processId)) {
        this.stats.own++;
        return;
      }
      this.opts.onNotify();
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${FEED_CHANNEL}`);
      const { rows } = await client.query<{ pid: number }>('select pg_backend_pid() as pid');
      this.pid = rows[0].pid;
    } catch (err) {
      onFail(err as Error);
      return;
    }
    if (failed) return;
    this.connected = true;
    if (this.backoffMs > 0) {
      this.stats.reconnects++;
      this.opts.log.info({}, 'LISTEN connection restored');
    }
    this.backoffMs = 0;
    // Whatever was notified while we were away is lost: read now.
    this.opts.onNotify();
  }

  /**
   * Hands the NOTIFY payloads that start with `prefix` (this process's self-check markers) to `heard`;
   * undefined: none are this process's.
   */
  hearMarkers(markers: { prefix: string; heard(payload: string): void } | undefined): void {
    this.markers = markers;
  }

  /** True for another process's marker, which wakes nothing: the next read finds its row anyway, and
   * waking every process for every process's marker would make N processes cost N² reads. This
   * process's own goes to the self-check, then on as any notification. */
  private foreignMarker(payload: string): boolean {
    if (this.markers !== undefined && payload.startsWith(this.markers.prefix)) {
      this.markers.heard(payload);
      return false;
    }
    this.stats.foreignMarkers++;
    return true;
  }

  private retry(): void {
    this.backoffMs = Math.min(Math.max(this.backoffMs * 2, 100), 5000);
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.connect(), this.backoffMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.connected = false;
    const c = this.client;
    this.client = undefined;
    if (c) await c.end().catch(() => {});
  }
}
