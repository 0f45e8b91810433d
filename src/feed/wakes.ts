/**
 * The tailer's wakes, counted: which of them a completed read covers (one that started after them
 * and reached the tail: Tailer.settled and caughtUp rely on it), and whether a commit woke the
 * tailer since its last read (a read on a standby must then wait for that commit's replay:
 * FeedReads.tail). The tailer's own timer wakes it too, but says no commit happened.
 *
 * Lifecycle: plain counters, one set per tailer. A waiter (`covered()`) resolves once a read covers
 * the wakes asked before it, or after its `maxMs`, whichever comes first: it holds nothing else.
 */
export class Wakes {
  private asked = 0;
  private covers = 0;
  private commits = 0;
  private commitsRead = 0;
  private waiters: { target: number; resolve: () => void }[] = [];

  /** A wake asked for; `commit`: a commit happened (NOTIFY, local poke), not the tailer's timer. */
  ask(commit: boolean): void {
    this.asked++;
    if (commit) this.commits++;
  }

  /** A read starts: the wakes it will cover, and whether a commit woke the tailer since the last read. */
  reading(): { covers: number; woken: boolean } {
    const woken = this.commits !== this.commitsRead;
    this.commitsRead = this.commits;
    return { covers: this.asked, woken };
  }

  /** The read that started when `covers` wakes were asked reached the tail. */
  readUpTo(covers: number): void {
    this.covers = covers;
    if (this.waiters.length === 0) return;
    const still: typeof this.waiters = [];
    for (const w of this.waiters) {
      if (w.target <= this.covers) w.resolve();
      else still.push(w);
    }
    this.waiters = still;
  }

  /** Every wake asked for so far is covered by a completed read. */
  get allCovered(): boolean {
    return this.covers >= this.asked;
  }

  /** Resolves once the wakes asked so far are covered, or after `maxMs`. */
  covered(maxMs: number): Promise<void> {
    if (this.allCovered) return Promise.resolve();
    return new Promise((resolve) => {
      const w = { target: this.asked, resolve };
      this.waiters.push(w);
      setTimeout(() => {
        this.waiters = this.waiters.filter((x) => x !== w);
        resolve();
      }, maxMs).unref();
    });
  }
}
