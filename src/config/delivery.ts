/**
 * Settings of what a request may carry and how events travel: size and connection limits, the group
 * commit, the tailer's window and reads, the SSE streams' timing, and the self-check that proves
 * delivery end to end.
 */
import { MAX_SETTING_MS, duration, int, type Setting, setting } from './settings.ts';

export const DELIVERY_SETTINGS = {
  maxBodyBytes: int(
    'MAX_BODY_BYTES',
    1024 * 1024,
    1024,
    'Largest request body, in bytes; over it: 413.',
    'Limits',
  ),
  maxEventBytes: int(
    'MAX_EVENT_BYTES',
    1024 * 1024,
    16,
    'Largest single event `data` or job `payload` (JSON text), in bytes; over it: 413.',
  ),
  maxJobResultBytes: int(
    'MAX_JOB_RESULT_BYTES',
    64 * 1024,
    2,
    'Largest job `result` stored with an ack (JSON text), in bytes; over it: 413 result_too_large.',
  ),
  maxSseConnections: int(
    'MAX_SSE_CONNECTIONS',
    20000,
    1,
    'SSE connections served by one process; over it, 503 too_many_connections with Retry-After before the stream starts.',
  ),
  slowSubscriberMaxMs: duration(
    'SLOW_SUBSCRIBER_TIMEOUT',
    '10s',
    100,
    'An SSE subscriber whose socket has stayed full this long (a client that stopped reading, or takes only a trickle) is dropped with a TCP reset; every frame it received carries an id, so it resumes with Last-Event-ID and loses nothing (docs/operations.md#slow-readers).',
    { max: MAX_SETTING_MS },
  ),
  sseMaxInFlightBytes: int(
    'SSE_MAX_IN_FLIGHT_BYTES',
    1024 * 1024,
    16 * 1024,
    "Bytes one SSE connection may have in flight (written by the service, not yet acknowledged by the client: Node's buffer plus the kernel's send queue); a connection over it that acknowledges less than this per second is dropped with a reset, and resumes with Last-Event-ID.",
  ),
  sseMaxTotalInFlightBytes: int(
    'SSE_MAX_TOTAL_IN_FLIGHT_BYTES',
    128 * 1024 * 1024,
    64 * 1024,
    'Bytes all SSE connections of a process may have in flight together; over it, the connections furthest behind are dropped with a reset until the sum is under it (they resume with Last-Event-ID). The bound on what readers that never read can cost, kernel send queues included.',
  ),
  batchMaxEvents: int(
    'BATCH_MAX_EVENTS',
    2000,
    1,
    'Most events (or jobs) gathered into one group-commit transaction.',
    'Delivery',
  ),
  windowEvents: int(
    'WINDOW_EVENTS',
    10000,
    100,
    'Recent events kept in memory to serve live and reconnecting subscribers without a query.',
  ),
  pageSize: int('PAGE_SIZE', 1000, 10, 'Rows per tail or catch-up query.'),
  pollIntervalMs: duration(
    'POLL_INTERVAL',
    '1s',
    10,
    'Fallback poll of the feed when no notification arrives (notifications are only a hint).',
    { max: MAX_SETTING_MS },
  ),
  idleReadDelayMs: duration(
    'IDLE_READ_DELAY',
    '25ms',
    0,
    'While no SSE subscriber, long-poll or waiting claim is connected to a process, it reads the feed at most this often after commits (one read for many commits instead of one each); a client that connects makes it read at once. 0: read after every commit.',
    { max: 1000 },
  ),
  tailFloorMarginMs: duration(
    'TAIL_FLOOR_MARGIN',
    '1h',
    0,
    "The tail read skips feed partitions wholly older than a time below which it has read every row, so its cost does not grow with RETENTION; that time trails what it has proved by this margin (covering the database clock's small steps back). 0: every tail read covers every partition.",
  ),
  startWaitMs: duration(
    'START_WAIT',
    '5s',
    0,
    'Longest wait for a safe start position (a subscriber starting at `latest`, a JSON read after a publish) while an open transaction holds committed events behind the horizon; then a JSON read answers 503 with Retry-After, and an SSE stream (answered 200) keeps waiting and is primed once a start is safe.',
    { max: MAX_SETTING_MS },
  ),
  unknownCursorResume: setting(
    'UNKNOWN_CURSOR_RESUME',
    'earliest',
    'Where a reader goes on when its cursor is not a position of this feed (from another database or server, or past everything committed: the database was restored or recreated): `earliest`, every event retention holds (in a restored or recreated feed these are events the client has not seen in this history), or `latest`, only what commits from now on (for clients that want live events only). SSE gets an in-band `reset` and goes on from there; JSON reads get 409 cursor_not_in_feed naming the position (docs/streams.md#cursors-from-another-history).',
    undefined,
    (raw): 'earliest' | 'latest' => {
      if (raw === 'earliest' || raw === 'latest') return raw;
      throw new Error(`UNKNOWN_CURSOR_RESUME must be earliest or latest (got ${JSON.stringify(raw)})`);
    },
  ),
  heartbeatMs: duration(
    'HEARTBEAT_INTERVAL',
    '15s',
    100,
    'SSE comment heartbeat; keep it below the shortest idle timeout of the proxies on the path.',
    { max: MAX_SETTING_MS },
  ),
  sseRetryMs: duration(
    'SSE_RETRY',
    '2s',
    0,
    'Reconnect delay suggested to SSE clients (the `retry:` field).',
    {
      max: MAX_SETTING_MS,
    },
  ),
  selfCheckIntervalMs: duration(
    'SELF_CHECK_INTERVAL',
    '10s',
    0,
    'How often each process writes a tiny marker to the internal stream `commitfeed/selfcheck` (never shown to readers) and follows it through its own delivery path: commit, LISTEN wake, tail read, fan-out. A stage missed is logged, counted in /metrics and shown by /readyz (docs/operations.md#self-check). 0: off (a deployment whose role cannot write turns it off by itself).',
    { section: 'Self-check', max: MAX_SETTING_MS },
  ),
  selfCheckBoundMs: duration(
    'SELF_CHECK_BOUND',
    '5s',
    10,
    'How long a marker may take, from its write, to pass every stage; a stage it has not passed by then is a miss.',
    { max: MAX_SETTING_MS },
  ),
  selfCheckMisses: int(
    'SELF_CHECK_MISSES',
    3,
    1,
    'Consecutive checks whose marker was not read by the tailer or not fanned out within the bound before /readyz answers 503; a stalled commit, LISTEN wake or horizon only makes it say `degraded`.',
  ),
} satisfies Record<string, Setting<unknown>>;
