/**
 * The feed's metrics: the publish group commit, the listener, the tailer (wakes, reads, the floor,
 * the horizon), reads on standbys, and the hub's subscribers. Every value is read at scrape time
 * from the modules' own counters; two cost a query, only when scraped: the feed lag (one
 * primary-key probe past the tailer's position) and, while the horizon is stalled, the backend
 * holding it. A failed query leaves its gauge at -1 (or without samples, for the labelled one).
 */
import type { Measured, Metrics } from '../metrics.ts';
import type { Feed } from './feed.ts';
import { horizonBlocker } from './queries/horizon-blocker.ts';
import { feedLag } from './queries/lag.ts';
import { DROP_REASONS } from './slow-readers.ts';

export function feedMetrics(feed: Feed): Measured {
  return {
    registerMetrics(m) {
      registerWriteMetrics(m, feed);
      registerTailMetrics(m, feed);
      registerHorizonMetrics(m, feed);
      if (feed.reads.configured) registerStandbyMetrics(m, feed);
      registerHubMetrics(m, feed);
    },
  };
}

function registerWriteMetrics(m: Metrics, feed: Feed): void {
  const b = feed.batcher.stats;
  m.counter(
    'commitfeed_publishes_total',
    'Publish requests committed, native and Mercure (a batch publish counts once)',
    () => b.requests,
  );
  m.counter(
    'commitfeed_events_written_total',
    'Events appended through the group-commit writer (Mercure updates from POST /.well-known/mercure included)',
    () => b.events,
  );
  m.counter(
    'commitfeed_commits_total',
    'Group-commit statements committed; each issues one NOTIFY. events_written / commits = mean batch size',
    () => b.statements,
  );
  m.gauge(
    'commitfeed_commit_batch_size_mean',
    'Mean events per group-commit statement since start',
    () => (b.statements === 0 ? 0 : b.events / b.statements),
    'average',
  );
}

function registerTailMetrics(m: Metrics, feed: Feed): void {
  const { listener, tailer } = feed;
  m.counters(
    'commitfeed_tailer_wakes_total',
    'Tailer wake-ups by source: notify (LISTEN), local (own commit), fallback (timer: idle poll, re-poll behind the horizon, error backoff)',
    ['source'],
    (add) => {
      const { notifications, own, foreignMarkers } = listener.stats;
      add({ source: 'notify' }, notifications - own - foreignMarkers);
      add({ source: 'local' }, tailer.stats.commitWakes);
      add({ source: 'fallback' }, tailer.stats.fallbackWakes);
    },
  );
  m.counter(
    'commitfeed_commits_handed_on_total',
    'Group commits whose events went to subscribers from memory as they committed, without a tail read (their statement found nothing before them the tailer lacked)',
    () => tailer.cleared.handedOn,
  );
  m.counter(
    'commitfeed_notifications_received_total',
    'NOTIFYs heard on the LISTEN connection',
    () => listener.stats.notifications,
  );
  m.counter(
    'commitfeed_notifications_own_total',
    "NOTIFYs sent by this process's own connections, not acted on (their commits wake the tailer directly)",
    () => listener.stats.own,
  );
  m.counter(
    'commitfeed_notifications_foreign_markers_total',
    "NOTIFYs of other processes' self-check markers, not acted on (their rows are read at the next read)",
    () => listener.stats.foreignMarkers,
  );
  m.counter(
    'commitfeed_listener_reconnects_total',
    'LISTEN connection re-established after a loss',
    () => listener.stats.reconnects,
  );
  m.gauge('commitfeed_listener_connected', '1 while the LISTEN connection is up', () =>
    listener.connected ? 1 : 0,
  );
  m.counter('commitfeed_tailer_polls_total', 'Reads of the global feed tail', () => tailer.stats.reads);
  m.counter(
    'commitfeed_tailer_deferred_wakes_total',
    'Commit wake-ups deferred by up to IDLE_READ_DELAY because nobody in this process waited for events',
    () => tailer.stats.deferredWakes,
  );
  m.counter(
    'commitfeed_tailer_events_total',
    'Events read from the feed tail into the window',
    () => tailer.stats.events,
  );
  m.counter(
    'commitfeed_tailer_errors_total',
    'Failed tail reads (retried with backoff)',
    () => tailer.stats.errors,
  );
  m.counter(
    'commitfeed_tailer_own_events_total',
    'Events this process committed that the tail read did not send back: the tailer took them from memory (src/feed/own-writes.ts)',
    () => feed.own.stats.recorded,
  );
  m.counter(
    'commitfeed_tailer_own_events_unheld_total',
    'Events this process committed that were read back from the table because too many were already held (rows waiting behind the horizon)',
    () => feed.own.stats.skipped,
  );
}

function registerHorizonMetrics(m: Metrics, feed: Feed): void {
  const { tailer, db } = feed;
  m.gauge(
    'commitfeed_tailer_floor_age_seconds',
    'How far the tail floor trails now: tail reads skip the partitions wholly before it (TAIL_FLOOR_MARGIN behind what was proved; it grows while an open transaction holds the horizon back); -1 with no floor yet or the floor off',
    () => {
      const at = tailer.floorAtMs;
      return at === Number.NEGATIVE_INFINITY ? -1 : (Date.now() - at) / 1000;
    },
    'max',
  );
  m.gauge(
    'commitfeed_horizon_stall_seconds',
    'How long committed rows have waited behind the transaction horizon (an older transaction still open); 0 when none wait',
    () => tailer.horizonStallMs / 1000,
    'max',
  );
  m.gauges(
    'commitfeed_horizon_blocker_age_seconds',
    'While the horizon is stalled: transaction age of the oldest open writing backend, labelled by pid and application_name',
    ['pid', 'application_name'],
    async (set) => {
      if (tailer.horizonStallMs === 0) return;
      const r = await horizonBlocker(db).catch(() => undefined);
      if (r) set({ pid: String(r.pid), application_name: r.applicationName }, r.ageSeconds);
    },
    'max',
  );
  m.gauge(
    'commitfeed_feed_lag_seconds',
    'Age of the oldest feed row past the position this process has delivered up to (0 when caught up; -1 if the database cannot be read)',
    () =>
      feedLag(db, tailer.position).then(
        (lag) => lag.ageS,
        () => -1,
      ),
    'max',
  );
}

function registerStandbyMetrics(m: Metrics, feed: Feed): void {
  const { reads } = feed;
  // Across workers (WORKERS > 1): `up` is the least any worker sees, lag the most.
  m.gauges(
    'commitfeed_standby_up',
    '1 while the standby serves feed reads (state ok)',
    ['standby'],
    (set) => {
      for (const s of reads.status()) set({ standby: s.name }, s.state === 'ok' ? 1 : 0);
    },
    'min',
  );
  m.gauges(
    'commitfeed_standby_lag_bytes',
    'WAL bytes the standby had yet to replay at the last probe (-1: unreachable)',
    ['standby'],
    (set) => {
      for (const s of reads.status()) set({ standby: s.name }, s.lagBytes);
    },
    'max',
  );
  m.counter(
    'commitfeed_standby_reads_total',
    'Feed reads (tail and catch-up pages) served by a standby',
    () => reads.stats.standby,
  );
  m.counter(
    'commitfeed_standby_fallback_reads_total',
    'Feed reads that went to the primary although standbys are configured (none usable, lagging past READ_LAG_WAIT, or failed)',
    () => reads.stats.fallbacks,
  );
  m.counter(
    'commitfeed_standby_replay_waits_total',
    "Pauses of a woken tail read waiting for the standby to replay the primary's WAL position",
    () => reads.stats.replayWaits,
  );
}

function registerHubMetrics(m: Metrics, feed: Feed): void {
  const { hub } = feed;
  m.gauge(
    'commitfeed_sse_connections',
    'Open SSE connections in this process (what MAX_SSE_CONNECTIONS limits)',
    () => hub.openStreams,
  );
  m.counter(
    'commitfeed_sse_frames_total',
    'Event frames written to SSE subscribers (live and catch-up)',
    () => hub.stats.frames,
  );
  m.counter(
    'commitfeed_sse_live_writes_total',
    'Socket writes by the live fan-out (one per subscriber per page)',
    () => hub.stats.delivered,
  );
  m.counters(
    'commitfeed_sse_slow_dropped_total',
    'SSE subscribers dropped with a reset, by reason: timeout (socket full for SLOW_SUBSCRIBER_TIMEOUT), in_flight (over SSE_MAX_IN_FLIGHT_BYTES), total (all connections over SSE_MAX_TOTAL_IN_FLIGHT_BYTES)',
    ['reason'],
    (add) => {
      for (const reason of DROP_REASONS) add({ reason }, hub.slow.stats.dropped[reason]);
    },
  );
  m.gauge(
    'commitfeed_sse_buffered_bytes',
    'Bytes written to SSE sockets and not yet taken by them (Node side, at scrape time)',
    () => hub.bufferedBytes(),
  );
  m.gauges(
    'commitfeed_sse_in_flight_bytes',
    "Bytes SSE connections have in flight (written, not acknowledged by the clients) at the last slow-reader sweep: in Node's buffers and in the kernel's send queues",
    ['where'],
    (set) => {
      const { inFlight, kernelQueued } = hub.slow.stats;
      set({ where: 'node' }, inFlight - kernelQueued);
      set({ where: 'kernel' }, kernelQueued);
    },
  );
  m.counter(
    'commitfeed_sse_sweeps_total',
    'Slow-reader sweeps (each reads the kernel socket tables while SSE connections exist)',
    () => hub.slow.stats.sweeps,
  );
  m.counter(
    'commitfeed_sse_sweep_seconds_total',
    'Wall time spent in slow-reader sweeps (reading /proc/net/tcp and judging every SSE connection)',
    () => hub.slow.stats.sweepSeconds,
  );
}
