/**
 * Where a read starts, as every route that reads the feed takes it: the cursor a request names
 * (givenCursor), checked against this feed's history (placeCursor: a cursor from another history
 * is told so, never silently stalled), and, when it names none and wants `latest`, a position after
 * every write acknowledged so far (safePosition). An SSE read takes them together (sseStart), as the
 * start of a feed-backed stream (feed-sse.ts).
 */
import type { FastifyRequest } from 'fastify';
import type { Config } from '../config/config.ts';
import { ApiError, unavailable } from '../errors.ts';
import { type Cursor, type GivenCursor, START, formatCursor, parseCursor } from '../feed/cursor.ts';
import type { Feed } from '../feed/feed.ts';
import type { NotInFeed } from '../feed/history.ts';
import { resetFrame } from '../feed/frames.ts';
import { safePosition as safeTailPosition } from '../feed/safe-position.ts';
import { errorSchema } from './errors.ts';
import type { FeedStart } from './feed-sse.ts';
import { primerFrame } from './sse.ts';

/**
 * The cursor a request names: its Last-Event-ID header (what EventSource sends on reconnect), else
 * `after`; undefined when it names none. A malformed one is a 400 `invalid_cursor`.
 */
export function givenCursor(request: FastifyRequest, after: string | undefined): GivenCursor | undefined {
  const header = request.headers['last-event-id'];
  const given = typeof header === 'string' && header !== '' ? header : after;
  if (given === undefined) return undefined;
  return parseGivenCursor(given, '');
}

/** `text` as a cursor, tagged or not; a malformed one is a 400 `invalid_cursor` (`what`: the field). */
function parseGivenCursor(text: string, what: string): GivenCursor {
  const c = parseCursor(text);
  if (c !== undefined) return c;
  throw new ApiError(
    400,
    'invalid_cursor',
    `${what}malformed cursor ${JSON.stringify(text.slice(0, 80))}: expected "<txid>-<id>.<tag>" as sent in an event id`,
  );
}

/**
 * A position after every write acknowledged so far and not past the horizon (feed/safe-position.ts):
 * the start of `latest` and the reach of a read-your-writes read. When an open transaction holds the
 * horizon behind committed rows for longer than START_WAIT, 503: any start would be in the past
 * (replaying acknowledged events) or past the horizon (missing the open transaction's events).
 */
export async function safePosition(feed: Feed, waitMs: number): Promise<Cursor> {
  const p = await safeTailPosition(feed.tailer, feed.db, waitMs);
  if (p === undefined) {
    throw unavailable(
      'unavailable',
      'committed events are waiting behind a transaction that is still open (the feed horizon); retry shortly',
    );
  }
  return p;
}

/** A cursor that is not a position of this feed, and where its reader goes on (UNKNOWN_CURSOR_RESUME). */
export interface NotInFeedCursor {
  given: GivenCursor;
  reason: NotInFeed;
  resumeFrom: Cursor;
}

/**
 * Checks a request's cursor against this feed's history (src/feed/history.ts): undefined when it may
 * be a position here, else why not and where to go on: `earliest`, the trim mark (everything
 * retention holds; in a restored or recreated feed, events the client has not seen in this history),
 * or `latest`, a position after every acknowledged write.
 */
export async function placeCursor(
  feed: Feed,
  config: Pick<Config, 'unknownCursorResume' | 'startWaitMs'>,
  given: GivenCursor,
): Promise<NotInFeedCursor | undefined> {
  const reason = await feed.history.check(given);
  if (reason === undefined) return undefined;
  const resumeFrom =
    config.unknownCursorResume === 'latest'
      ? await safePosition(feed, config.startWaitMs)
      : await feed.tailer.catchUp.trimMark();
  return { given, reason, resumeFrom };
}

/**
 * How an SSE stream opens for a cursor not in this feed: primed with the cursor as given (a client
 * that drops before reading on asks again, and is told again), then the `reset` that moves its
 * Last-Event-ID to `resumeFrom`, before any event.
 */
export function notInFeedOpening(feed: Feed, not: NotInFeedCursor): string {
  const tag = feed.history.tag;
  return givenPrimer(not.given) + resetFrame(not.resumeFrom, tag, not.reason);
}

/**
 * Where an SSE read starts (a FeedStart: src/http/feed-sse.ts): after the request's cursor, primed
 * with it; for a cursor not in this feed, at UNKNOWN_CURSOR_RESUME's position, primed with the cursor
 * as given and then told `reset`; with no cursor, at `from`: the feed's start, or after every
 * acknowledged write (`latest`), primed there. Needs the database unless the cursor is one this
 * process already knows (history.ts) or the start is `earliest` or the caught-up tail.
 */
export async function sseStart(
  feed: Feed,
  config: Pick<Config, 'unknownCursorResume' | 'startWaitMs'>,
  given: GivenCursor | undefined,
  from: 'earliest' | 'latest' | undefined,
): Promise<FeedStart> {
  const tag = feed.history.tag;
  if (given !== undefined) {
    const notInFeed = await placeCursor(feed, config, given);
    if (notInFeed !== undefined) {
      return { after: notInFeed.resumeFrom, opening: notInFeedOpening(feed, notInFeed) };
    }
    return { after: given, opening: primerFrame(formatCursor(given, tag)) };
  }
  const after = from === 'earliest' ? START : await safePosition(feed, config.startWaitMs);
  return { after, opening: primerFrame(formatCursor(after, tag)) };
}

/** What an SSE read that names `given` says before its start is decided: the cursor as given (the
 * client's Last-Event-ID stays what it sent). */
export function givenPrimer(given: GivenCursor | undefined): string {
  return given === undefined ? '' : primerFrame(formatCursor(given, given.tag));
}

const EXPLAIN: Record<NotInFeed, string> = {
  foreign: 'was minted by another feed (another database or server, or this one before it was recreated)',
  ahead:
    'is past everything this feed has committed (the database was restored or recreated, or the cursor comes from another server)',
};

/**
 * The answer to a read (or a cursor input) whose cursor is not in this feed: 409
 * `cursor_not_in_feed` with `reason` and `resumeFrom`, the cursor to go on from. A JSON read has no
 * in-band place to say it (an SSE read gets a `reset` event instead).
 */
export function cursorNotInFeed(feed: Feed, not: NotInFeedCursor): ApiError {
  const { given } = not;
  const tag = feed.history.tag;
  const resumeFrom = formatCursor(not.resumeFrom, tag);
  return new ApiError(
    409,
    'cursor_not_in_feed',
    `cursor ${formatCursor(given, given.tag)} ${EXPLAIN[not.reason]}: nothing would ever follow it here. ` +
      `Events you have seen may not exist in this feed; start again from resumeFrom (${resumeFrom}).`,
    {},
    { reason: not.reason, resumeFrom },
  );
}

/**
 * A cursor a request names in its body or query (a `from`, an event id to resend or look up), in
 * either form (tagged or not): 400 `invalid_cursor` when it is malformed, 409 `cursor_not_in_feed`
 * when it is not a position of this feed (a tag of another feed, or past everything committed), as
 * for a JSON read. `what` names the field in the 400's message.
 */
export async function cursorInFeed(
  feed: Feed,
  config: Pick<Config, 'unknownCursorResume' | 'startWaitMs'>,
  text: string,
  what: string,
): Promise<GivenCursor> {
  const c = parseGivenCursor(text, `${what}: `);
  const notInFeed = await placeCursor(feed, config, c);
  if (notInFeed !== undefined) throw cursorNotInFeed(feed, notInFeed);
  return c;
}

/** The 409 answer's schema (cursorNotInFeed). */
export const cursorNotInFeedSchema = {
  ...errorSchema,
  properties: {
    ...errorSchema.properties,
    reason: { type: 'string', enum: ['ahead', 'foreign'], description: 'why the cursor is not in this feed' },
    resumeFrom: { type: 'string', description: 'the cursor to go on from (UNKNOWN_CURSOR_RESUME)' },
  },
} as const;
