/**
 * A Mercure subscriber as a hub Selection (src/feed/subscriber.ts): which updates one connection
 * receives and how it catches up. An update is taken when any of its topics (canonical or alternate)
 * matches any of the connection's matchers (its Mercure subscriptions) — once, however many match —
 * and, when it is private, when the token's subscribe grants match any of its topics (draft-08
 * §Authorization: matchers route, grants authorize; an anonymous subscriber never receives a private
 * update).
 *
 * Catch-up: when every matcher selects one topic (an exact one, or a 0.x `topic=` that is no URI
 * Template), pages come from the commitfeed.mercure_topics index (only the connection's topics are
 * read); otherwise (URL patterns, URI Templates, `*`) from the updates stream in feed order through
 * the tailer (its window when it covers the cursor), filtered here. Either way a
 * page from the table is read on a standby when READ_DATABASE_URL names one (src/feed/reads.ts), a
 * page advances to the last row read, so a page that sends nothing still moves on, and it is bounded
 * by the page size, the tailer's position and retention.
 */
import { type Cursor, compareCursors } from '../feed/cursor.ts';
import type { FeedEvent } from '../feed/event.ts';
import type { FramesRead } from '../feed/catch-up-reads.ts';
import { chunkFrames } from '../feed/frames.ts';
import type { Selection } from '../feed/subscriber.ts';
import type { FeedReads } from '../feed/reads.ts';
import type { Tailer } from '../feed/tailer.ts';
import { ApiError } from '../errors.ts';
import { type FormPair, hasForbiddenChars } from './form.ts';
import { MERCURE_STREAM, mercureFrame, updateOf } from './frames.ts';
import type { MercureIds } from './ids.ts';
import {
  MatcherError,
  type TopicMatcher,
  type TopicSelector,
  compileSelectors,
  selectsOneTopic,
} from './match.ts';
import { readTopicRange } from './queries.ts';

/** Most matchers in one subscribe request (over: 400). */
export const MAX_MATCHERS = 100;

/** What a subscribe request asks for (its query, and a QUERY request's body, parsed strictly). */
export interface SubscribeRequest {
  selectors: TopicSelector[];
  /** `last_event_id` (the Last-Event-ID header wins over it); in compatibility mode, else a 0.x spelling. */
  lastEventId: string | undefined;
}

const MATCH_PARAMS: Record<string, TopicSelector['matchType']> = {
  match: 'exact',
  match_exact: 'exact',
  match_urlpattern: 'urlpattern',
};

/** The resume parameter's names, first found wins: the draft's, then the 0.x ones (compatibility
 * mode only; the guide does not list them, 0.x clients send them: draft-07 `lastEventID`, older
 * hubs `Last-Event-ID`). */
const RESUME_PARAMS = ['last_event_id', 'lastEventID', 'Last-Event-ID'];

/**
 * The matchers and cursor of a subscribe request's pairs (400 for any name or value the draft
 * refuses). With `legacy` (MERCURE_PROTOCOL_COMPATIBILITY=8), `topic` is a 0.x selector too, mixed
 * freely with the `match` ones; without it, `topic` in any case is a 400 (never silently dropped).
 */
export function subscribeRequest(pairs: readonly FormPair[], legacy = false): SubscribeRequest {
  const selectors: TopicSelector[] = [];
  const seen = new Set<string>();
  const resume: (string | undefined)[] = [];
  for (const { name, value } of pairs) {
    const matchType =
      legacy && name === 'topic'
        ? 'topic'
        : Object.hasOwn(MATCH_PARAMS, name)
          ? MATCH_PARAMS[name]
          : undefined;
    if (matchType === undefined) {
      const lower = name.toLowerCase();
      if (lower.startsWith('match') || lower === 'topic') {
        throw new ApiError(400, 'unsupported_matcher', unsupported(name, legacy));
      }
      const r = RESUME_PARAMS.indexOf(name);
      if (r === 0 || (r > 0 && legacy)) resume[r] ??= value;
      continue; // other parameters are ignored (access_token is never a credential here)
    }
    if (hasForbiddenChars(value)) {
      throw new ApiError(400, 'invalid_matcher', `${name} must not contain control or format characters`);
    }
    const key = `${matchType} ${value}`;
    if (seen.has(key)) continue; // identical (type, value) pairs are one Mercure subscription
    seen.add(key);
    selectors.push({ match: value, matchType });
    if (selectors.length > MAX_MATCHERS) {
      throw new ApiError(400, 'too_many_matchers', `a subscription has at most ${MAX_MATCHERS} matchers`);
    }
  }
  if (selectors.length === 0) {
    throw new ApiError(
      400,
      'missing_matcher',
      `a subscription needs at least one match, match_exact or match_urlpattern${legacy ? ' (or topic)' : ''}`,
    );
  }
  return { selectors, lastEventId: resume.find((v) => v !== undefined) };
}

function unsupported(name: string, legacy: boolean): string {
  const quoted = JSON.stringify(name.slice(0, 60));
  if (name.toLowerCase() === 'topic' && !legacy) {
    return 'the 0.x "topic" parameter is not supported: use match or match_urlpattern (or run the hub with MERCURE_PROTOCOL_COMPATIBILITY=8)';
  }
  return `unknown matcher parameter ${quoted}: use match, match_exact or match_urlpattern${legacy ? ' (or topic)' : ''} (names are case-sensitive)`;
}

/** Compiles selectors for routing; an invalid pattern is a 400 (in a token it is a 401: authorize.ts). */
export function compileRequestSelectors(selectors: readonly TopicSelector[], hubUrl: string): TopicMatcher {
  try {
    return compileSelectors(selectors, hubUrl);
  } catch (err) {
    if (err instanceof MatcherError) throw new ApiError(400, 'invalid_matcher', err.message);
    throw err;
  }
}

export interface MercureSelectionOptions {
  reads: FeedReads;
  tailer: Tailer;
  selectors: readonly TopicSelector[];
  matcher: TopicMatcher;
  /** May the token read a private update with these topics (its subscribe grants match any)?
   * Always false for an anonymous subscriber (public updates only). */
  canRead(topics: readonly string[]): boolean;
  /** The connection resumed from an id it had: a trim during catch-up ends the stream, so the
   * reconnect hears `Mercure-Last-Event-ID: earliest` (see resume.ts). */
  endOnReset: boolean;
  retryMs: number;
  /** The hub's counters (frames written) for /metrics. */
  stats: { frames: number };
  /** The database's generated ids (ids.ts): an update stored without its id has this one. */
  ids: MercureIds;
}

export class MercureSelection implements Selection {
  /** Exact topics to read from the index, or undefined when some matcher is a pattern or `*`. */
  private readonly exactTopics: string[] | undefined;
  private readonly streamSet: ReadonlySet<string> = new Set([MERCURE_STREAM]);
  /** Updates this connection received (live and catch-up). */
  delivered = 0;

  constructor(private readonly opts: MercureSelectionOptions) {
    this.exactTopics = opts.selectors.every(selectsOneTopic) ? opts.selectors.map((s) => s.match) : undefined;
  }

  accepts(e: FeedEvent): boolean {
    if (e.stream !== MERCURE_STREAM) return false;
    const u = updateOf(e, this.opts.ids);
    if (!u.topics.some(this.opts.matcher)) return false;
    return !u.private || this.opts.canRead(u.topics);
  }

  frame(e: FeedEvent): string {
    this.delivered++;
    this.opts.stats.frames++;
    return mercureFrame(e, this.opts.ids);
  }

  onReset(_mark: Cursor): { chunk: string; end: boolean } | undefined {
    if (!this.opts.endOnReset) return undefined;
    return {
      chunk: `retry: ${this.opts.retryMs}\n: updates after your last id were dropped by retention; reconnect\n\n`,
      end: true,
    };
  }

  async readPage(after: Cursor, limit: number, chunkBytes: number): Promise<FramesRead> {
    const { tailer } = this.opts;
    const upTo = tailer.position;
    if (compareCursors(after, upTo) >= 0) return { chunks: [], count: 0, position: after, more: false };
    let events: FeedEvent[];
    let position: Cursor;
    if (this.exactTopics !== undefined) {
      const topics = this.exactTopics;
      const page = await this.opts.reads.range(upTo, (db) => readTopicRange(db, topics, after, upTo, limit));
      if (compareCursors(after, page.trimMark) < 0) {
        return { chunks: [], count: 0, position: page.trimMark, more: true, reset: page.trimMark };
      }
      events = page.events;
      position = events.length === limit ? events[events.length - 1] : upTo;
    } else {
      const page = await tailer.catchUp.read([MERCURE_STREAM], this.streamSet, after, limit);
      if (page.reset) return { chunks: [], count: 0, position: page.position, more: true, reset: page.reset };
      events = page.events;
      position = page.position;
    }
    const { chunks, count } = chunkFrames(
      events,
      (e) => (this.accepts(e) ? this.frame(e) : undefined),
      chunkBytes,
    );
    return { chunks, count, position, more: events.length === limit };
  }
}
