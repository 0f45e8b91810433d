/**
 * Stream routes: publish (single or batch), and read over SSE or JSON (with long-poll). No SQL here:
 * writes go through the batcher, reads through the tailer and hub.
 *
 * A publish is a one-or-batch route (src/http/one-or-batch.ts): each event checked, the batch handed
 * to the feed's batcher. A read goes readStreams (authorize, cursor) → sseRead (a hub subscriber on a
 * feed-backed SSE stream, src/http/feed-sse.ts) or cache revalidation, start and jsonRead (one page,
 * long-polled by pollPage).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { authorize, canSubscribe } from '../auth/policy.ts';
import { OPEN } from '../auth/tokens.ts';
import { GlobSelection, isGlob } from './glob.ts';
import type { Config } from '../config/config.ts';
import { oneOrBatchRoute } from '../http/one-or-batch.ts';
import { type Cursor, type GivenCursor, START, compareCursors, formatCursor } from '../feed/cursor.ts';
import type { Feed } from '../feed/feed.ts';
import { type EventBody, type FeedEvent, eventJson, toEventInput } from '../feed/event.ts';
import { resetJson } from '../feed/frames.ts';
import {
  multiReadQuery,
  publishBody,
  publishResponse,
  readResponse,
  streamParams,
  streamReadQuery,
} from './schemas.ts';
import { cacheableRequest, markImmutable, markUncacheable, matches, pageEtag } from '../http/page-cache.ts';
import { openFeedSse } from '../http/feed-sse.ts';
import {
  cursorNotInFeed,
  givenCursor,
  givenPrimer,
  placeCursor,
  safePosition,
  sseStart,
} from '../http/read-position.ts';
import { requireSse, wantsSse } from '../http/sse.ts';

interface ReadQuery {
  after?: string;
  from: 'earliest' | 'latest';
  limit: number;
  wait: number;
}

interface StreamDeps {
  feed: Feed;
  config: Config;
}

export function streamRoutes(app: FastifyInstance, deps: StreamDeps): void {
  const { feed, config } = deps;

  oneOrBatchRoute(app, {
    url: '/v1/streams/:stream/events',
    param: 'stream',
    action: 'publish',
    schema: {
      summary: 'Publish one event or a batch',
      tags: ['streams'],
      params: streamParams,
      body: publishBody,
      response: publishResponse,
    },
    list: 'events',
    check: (stream, event: EventBody, where) => toEventInput(stream, event, config.maxEventBytes, where),
    write: (inputs) => feed.batcher.publish(inputs),
    show: (r) => r,
  });

  app.get<{ Params: { stream: string } }>(
    '/v1/streams/:stream/events',
    {
      schema: {
        summary: 'Read a stream (SSE or JSON)',
        tags: ['streams'],
        params: streamParams,
        querystring: streamReadQuery,
        response: readResponse,
      },
    },
    (request, reply) => readStreams(deps, request, reply, [request.params.stream]),
  );

  app.get<{ Querystring: { stream: string[] } }>(
    '/v1/events',
    {
      schema: {
        summary: 'Read several streams on one connection (SSE or JSON)',
        tags: ['streams'],
        querystring: multiReadQuery,
        response: readResponse,
      },
    },
    (request, reply) => readStreams(deps, request, reply, [...new Set(request.query.stream)]),
  );
}

/**
 * A read of one or several streams, checked here, then served over SSE (sseRead) or as one JSON page
 * (placed here, read by jsonRead): after the request's cursor (`Last-Event-ID` or `after`), else at
 * `from`.
 */
async function readStreams(
  deps: StreamDeps,
  request: FastifyRequest,
  reply: FastifyReply,
  streams: string[],
): Promise<unknown> {
  const { feed, config } = deps;
  const query = request.query as ReadQuery;
  const globs = streams.filter(isGlob);
  const names = globs.length === 0 ? streams : streams.filter((s) => !isGlob(s));
  // Every named stream up front, whatever the cursor: replay is authorized like live delivery. A
  // glob's streams are checked one by one as they appear (GlobSelection).
  authorize(request, 'subscribe', names);
  if (globs.length > 0) requireSse(request, 'a read of stream globs (`*`)', 400, 'glob_needs_sse');
  const given = givenCursor(request, query.after);
  if (wantsSse(request))
    return sseRead(deps, request, reply, { streams, names, globs, given, from: query.from });
  // A cursor from another history: JSON answers 409 naming where to go on (SSE says `reset` in-band).
  const notInFeed = given === undefined ? undefined : await placeCursor(feed, config, given);
  if (notInFeed !== undefined) throw cursorNotInFeed(feed, notInFeed);
  // A full page after a cursor named in the URL never changes (src/http/page-cache.ts); a
  // revalidation of one costs no page read, only the shared trim-mark check (a trimmed cursor gets
  // its `reset` from the read below, like everywhere else).
  const etag = cacheableRequest(request, query.after)
    ? pageEtag({ streams, after: query.after, limit: query.limit })
    : undefined;
  const shared = request.principal === OPEN;
  if (
    etag !== undefined &&
    matches(request, etag) &&
    given !== undefined &&
    compareCursors(given, await feed.tailer.catchUp.trimMark()) >= 0
  ) {
    markImmutable(reply, etag, shared, config.retentionMs);
    return reply.code(304).send();
  }
  // Read-your-writes: a JSON read reaches every event acknowledged before it, and `latest` starts
  // after them all.
  const reach = await safePosition(feed, config.startWaitMs);
  const start = given ?? (query.from === 'earliest' ? START : reach);
  return jsonRead(deps, reply, { streams, query, start, reach, cache: { etag, shared } });
}

/**
 * The streams' events over SSE until the client leaves (or shutdown), from where sseStart places the
 * read; decided in-band when that needs a database that does not answer now (feed-sse.ts).
 */
function sseRead(
  deps: StreamDeps,
  request: FastifyRequest,
  reply: FastifyReply,
  read: { streams: string[]; names: string[]; globs: string[]; given?: GivenCursor; from: ReadQuery['from'] },
): Promise<FastifyReply> {
  const { feed, config } = deps;
  const { streams, names, globs, given } = read;
  return openFeedSse(request, reply, {
    feed,
    config,
    maxPerToken: config.maxSsePerToken,
    provisional: givenPrimer(given),
    decide: () => sseStart(feed, config, given, read.from),
    subscribe: (start, sink) => {
      const selection =
        globs.length === 0
          ? undefined
          : new GlobSelection({
              reads: feed.reads,
              tailer: feed.tailer,
              names,
              globs,
              canRead: (stream) => canSubscribe(request, stream),
            });
      const subscriber = feed.hub.subscribe(streams, start.after, sink, selection);
      return () => feed.hub.unsubscribe(subscriber);
    },
  });
}

interface JsonRead {
  streams: string[];
  query: ReadQuery;
  start: Cursor;
  /** Read-your-writes: the page reaches at least this far. */
  reach: Cursor | undefined;
  /** The page's ETag when it may be cached once full; `shared`: by shared caches too. */
  cache: { etag: string | undefined; shared: boolean };
}

/** One JSON page of the streams' events after `start`, long-polled up to `wait` seconds when empty. */
async function jsonRead(deps: StreamDeps, reply: FastifyReply, read: JsonRead): Promise<string> {
  const { query, start, cache } = read;
  const { events, reset, waited } = await pollPage(deps.feed, reply, read);
  const tag = deps.feed.history.tag;
  const next = events.length > 0 ? events[events.length - 1].cursor : formatCursor(reset ?? start, tag);
  reply.type('application/json');
  if (cache.etag !== undefined && !waited && reset === undefined && events.length === query.limit) {
    markImmutable(reply, cache.etag, cache.shared, deps.config.retentionMs);
  } else {
    markUncacheable(reply);
  }
  const said = reset === undefined ? '' : `,"reset":${resetJson('trimmed', reset, tag)}`;
  return `{"events":[${events.map(eventJson).join(',')}],"next":"${next}"${said}}`;
}

/**
 * Reads pages until one has events, the wait runs out or the client leaves. `reset`: retention
 * dropped events past the cursor (reported in the body, reading on from the mark). `waited`: the
 * read had to wait, so it is the live edge (followers of the tail, never served from a cache).
 */
async function pollPage(
  feed: Feed,
  reply: FastifyReply,
  read: JsonRead,
): Promise<{ events: FeedEvent[]; reset: Cursor | undefined; waited: boolean }> {
  const { streams, query, reach } = read;
  const streamSet = new Set(streams);
  const deadline = Date.now() + query.wait * 1000;
  const abort = new AbortController();
  reply.raw.on('close', () => abort.abort());
  let after = read.start;
  let events: FeedEvent[] = [];
  let reset: Cursor | undefined;
  let waited = false;
  for (;;) {
    const page = await feed.tailer.catchUp.read(streams, streamSet, after, query.limit, reach);
    if (page.reset) {
      reset = page.reset;
      after = page.position;
      continue;
    }
    events = page.events;
    after = page.position;
    const left = deadline - Date.now();
    if (events.length > 0 || left <= 0 || abort.signal.aborted) break;
    // The tail may have moved while the read finished: read again before sleeping.
    if (compareCursors(feed.tailer.position, after) > 0) continue;
    waited = true;
    await feed.hub.waitForEvents(streams, left, abort.signal);
  }
  return { events, reset, waited };
}
