/**
 * Stream globs on `GET /v1/events`: `stream=orders.*` subscribes to every stream whose name matches,
 * present and future, with catch-up. Grammar: a name (`A-Z a-z 0-9 . _ : -`) in which `*` stands for
 * any run of name characters, empty included (`orders.*`, `*.created`, `tenant-*:audit`, `*`). A glob
 * matches names only, so the internal streams (`queue/…`, `mercure/…`, whose `/` no name has) are
 * never matched, in JavaScript as in SQL.
 *
 * A glob connection is a hub Selection offered every event (src/feed/subscriber.ts): it keeps the
 * events of its exact streams and of the streams its globs match, that the token may read (a glob
 * reveals no stream the token could not subscribe to by name), and frames them as a connection to
 * several streams does (`id: <cursor>/<stream>`). Catch-up pages through the whole feed in (txid, id)
 * order from the table (on a standby when READ_DATABASE_URL names one, like every catch-up read: see
 * src/feed/reads.ts), filtered in process; each page advances to the last row read, so it is bounded
 * by the page size and retention, and a trim sends the native `reset` frame like any stream read.
 */
import { type Cursor, compareCursors } from '../feed/cursor.ts';
import type { FeedEvent } from '../feed/event.ts';
import type { FramesRead } from '../feed/catch-up-reads.ts';
import { chunkFrames, namedSseFrame, resetFrame } from '../feed/frames.ts';
import { readAllNamesRange } from '../feed/queries/all-names-range.ts';
import type { FeedReads } from '../feed/reads.ts';
import type { Selection } from '../feed/subscriber.ts';
import type { Tailer } from '../feed/tailer.ts';

/** A stream parameter of /v1/events: a name, or a glob when it holds `*`. */
export const GLOB_PATTERN = '^[A-Za-z0-9._:*-]{1,200}$';

export function isGlob(s: string): boolean {
  return s.includes('*');
}

/** The regular expression of a glob (linear: one `[...]*` per star, no nesting). */
export function globRegExp(glob: string): RegExp {
  const body = glob
    .split('*')
    .map((part) => part.replace(/[.]/g, '\\.'))
    .join('[A-Za-z0-9._:-]*');
  return new RegExp(`^${body}$`);
}

export interface GlobSelectionOptions {
  reads: FeedReads;
  tailer: Tailer;
  names: readonly string[];
  globs: readonly string[];
  /** May the token read this stream? */
  canRead(stream: string): boolean;
}

export class GlobSelection implements Selection {
  readonly allStreams = true;
  private readonly names: ReadonlySet<string>;
  private readonly res: RegExp[];
  /** Per stream name: whether it is selected (names are few; the answer never changes). */
  private readonly decided = new Map<string, boolean>();

  constructor(private readonly opts: GlobSelectionOptions) {
    this.names = new Set(opts.names);
    this.res = opts.globs.map(globRegExp);
  }

  accepts(e: FeedEvent): boolean {
    let ok = this.decided.get(e.stream);
    if (ok === undefined) {
      ok =
        !e.stream.includes('/') &&
        (this.names.has(e.stream) || this.res.some((re) => re.test(e.stream))) &&
        this.opts.canRead(e.stream);
      if (this.decided.size < 10_000) this.decided.set(e.stream, ok);
    }
    return ok;
  }

  frame(e: FeedEvent): string {
    return namedSseFrame(e);
  }

  onReset(mark: Cursor): { chunk: string; end: boolean } {
    return { chunk: resetFrame(mark, this.opts.tailer.history.tag), end: false };
  }

  async readPage(after: Cursor, limit: number, chunkBytes: number): Promise<FramesRead> {
    const upTo = this.opts.tailer.position;
    if (compareCursors(after, upTo) >= 0) return { chunks: [], count: 0, position: after, more: false };
    const { events, trimMark } = await this.opts.reads.range(upTo, (db) =>
      readAllNamesRange(db, after, upTo, limit, this.opts.tailer.history.suffix),
    );
    if (compareCursors(after, trimMark) < 0) {
      return { chunks: [], count: 0, position: trimMark, more: true, reset: trimMark };
    }
    const { chunks, count } = chunkFrames(
      events,
      (e) => (this.accepts(e) ? this.frame(e) : undefined),
      chunkBytes,
    );
    const more = events.length === limit;
    return { chunks, count, position: more ? events[events.length - 1] : upTo, more };
  }
}
