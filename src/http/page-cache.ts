/**
 * HTTP caching of JSON history pages. A page read with `?after=<cursor>` that came back full (`limit`
 * events, no `reset`) lies wholly below the tail and the horizon: every event in it is final, and no
 * event can ever commit between `after` and its last event (that is what the horizon guarantees), so
 * the same URL answers the same bytes for as long as the events are kept. Such a page is served with a
 * strong ETag and `Cache-Control: ..., immutable`, so a shared cache or CDN can absorb a catch-up storm
 * (many clients reading the same range cost the database one read per page).
 *
 * Everything else stays `no-store`: a short page (it ends at the tail, the next commit changes it), a
 * long-poll that waited, a `reset` answer (it depends on the trim mark), a `from=latest|earliest` read
 * (its meaning moves with the tail and with retention), and a cursor sent as `Last-Event-ID` (a header
 * that would otherwise share a URL with a `latest` read).
 *
 * Tokens: when access control is off, a cacheable page is `public`. When a token was needed, it is
 * `private` (a browser may keep it, a shared cache must not), so one token's pages are never served to
 * another; `Vary` names the headers a response depends on either way.
 *
 * The ETag is derived from what the page is (streams, cursor, limit, body format) rather than hashed
 * from its bytes: it is only ever issued for a full page, and a full page never changes, so a
 * revalidation (If-None-Match) is answered 304 without reading the page, once the (shared, one-row)
 * trim-mark check shows retention has not dropped it. A forged If-None-Match for a page that was
 * never full only earns its sender an empty 304.
 */
import { createHash } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';

/** Bumped whenever the JSON form of a page changes, so old cached copies are not revalidated. */
const FORMAT = 'v1';
/** RFC 9111 caps freshness at about a year in practice (ElectricSQL and most CDNs use the same). */
const MAX_AGE_CAP_S = 365 * 24 * 3600;

export interface PageIdentity {
  streams: readonly string[];
  /** The `after` query parameter as sent. */
  after: string;
  limit: number;
}

/** The strong ETag of the page a request names. */
export function pageEtag(page: PageIdentity): string {
  const h = createHash('sha256')
    .update(`${FORMAT}\n${page.after}\n${page.limit}\n${page.streams.join('\n')}`)
    .digest('base64url')
    .slice(0, 27);
  return `"${h}"`;
}

/** True when the request's If-None-Match lists `etag` (weak comparison, as RFC 9110 asks). A `*` is
 * not honoured: it would answer 304 for a page that was never full. */
export function matches(request: FastifyRequest, etag: string): boolean {
  const header = request.headers['if-none-match'];
  if (typeof header !== 'string' || header === '') return false;
  return header.split(',').some((tag) => {
    const t = tag.trim();
    return t === etag || t === `W/${etag}`;
  });
}

/** Whether a page may be cached at all: an `after` cursor in the URL, and no Last-Event-ID header. */
export function cacheableRequest(request: FastifyRequest, after: string | undefined): after is string {
  const header = request.headers['last-event-id'];
  return after !== undefined && !(typeof header === 'string' && header !== '');
}

/**
 * Marks a full page as immutable. `shared`: no token was needed (access control off), so shared
 * caches may keep it; otherwise only the client's own cache may. Freshness is capped by retention:
 * after that the events may be gone and the cursor should be answered with a `reset`.
 */
export function markImmutable(reply: FastifyReply, etag: string, shared: boolean, retentionMs: number): void {
  const maxAge = Math.max(1, Math.min(MAX_AGE_CAP_S, Math.floor(retentionMs / 1000)));
  reply
    .header('etag', etag)
    .header('cache-control', `${shared ? 'public' : 'private'}, max-age=${maxAge}, immutable`);
  addVary(
    reply,
    shared ? ['accept', 'last-event-id'] : ['accept', 'last-event-id', 'authorization', 'cookie'],
  );
}

/** Adds to Vary without dropping what is there (CORS adds `Origin` before the handler runs). */
function addVary(reply: FastifyReply, names: string[]): void {
  const had = reply.getHeader('vary');
  const list = (Array.isArray(had) ? had.join(',') : String(had ?? ''))
    .split(',')
    .map((v) => v.trim())
    .filter((v) => v !== '');
  const seen = new Set(list.map((v) => v.toLowerCase()));
  for (const n of names) if (!seen.has(n)) list.push(n);
  reply.header('vary', list.join(', '));
}

/** Every other read: never stored (the next commit, the trim mark or the tail may change it). */
export function markUncacheable(reply: FastifyReply): void {
  reply.header('cache-control', 'no-store');
}
