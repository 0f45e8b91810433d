/**
 * Which history a cursor belongs to: this feed's tag, derived from its epoch (a random value created
 * with the schema, migrations/0006_feed_epoch.ts), ends every cursor the service mints (cursor.ts),
 * so a cursor of another feed can be told from one of this feed.
 *
 * Lifecycle: one per tailer; `start()` reads the epoch (before any cursor is minted).
 */
import type { Db } from '../db/database.ts';
import { epochTag, tagCursorText, tagSuffix } from './cursor.ts';
import type { AppendResult } from './queries/append.ts';
import { readFeedEpoch } from './queries/feed-epoch.ts';

/** Why a cursor is not a position of this feed. */
export type NotInFeed = 'ahead' | 'foreign';

export class FeedHistory {
  private ownTag = '';
  private ownSuffix = '';

  constructor(private readonly db: Db) {}

  /** Reads the feed's epoch: its tag goes on every cursor minted from now on. */
  async start(): Promise<void> {
    this.ownTag = epochTag(await readFeedEpoch(this.db));
    this.ownSuffix = tagSuffix(this.ownTag);
  }

  /** This feed's tag ('' before start). */
  get tag(): string {
    return this.ownTag;
  }

  /** What follows `<txid>-<id>` in this feed's cursors (`.<tag>`). */
  get suffix(): string {
    return this.ownSuffix;
  }

  /** Append results (their cursors as the SQL functions return them, untagged) with this feed's tag. */
  tagged(results: AppendResult[]): AppendResult[] {
    for (const r of results) r.id = tagCursorText(r.id, this.ownTag);
    return results;
  }
}
