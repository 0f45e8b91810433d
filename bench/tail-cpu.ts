// The tail read's client-side cost: node-postgres parsing plus toEvent, per row, for full pages.
// `DATABASE_URL=postgres://… npx tsx bench/tail-cpu.ts [pages]` against a database holding at
// least 1,000 events (any commitfeed database after a batched bench). It reads the same first page
// over and over, so PostgreSQL's side stays the same and only this process's CPU is compared.
// `--own`: the page's events are held as this process's own writes (src/feed/own-writes.ts), as
// after a batched publish through this process: the rows come back without their contents.
import { createDatabase } from '../src/db/database.ts';
import { START } from '../src/feed/cursor.ts';
import { OwnWrites } from '../src/feed/own-writes.ts';
import { readTail } from '../src/feed/queries.ts';

const url = process.env.DATABASE_URL;
if (!url) throw new Error('set DATABASE_URL to a commitfeed database with at least 1,000 events');
const args = process.argv.slice(2);
const pages = Number(args.find((a) => /^\d+$/.test(a)) ?? 300);
const { db, pool } = createDatabase({
  url,
  poolSize: 1,
  statementTimeoutMs: 30_000,
  log: { warn: () => {}, error: () => {} },
});
let own: OwnWrites | undefined;
if (args.includes('--own')) {
  own = new OwnWrites(1000);
  const page = await readTail(db, START, 1000);
  own.record(
    page.events,
    page.events.map((e) => ({ id: e.cursor, stream: e.stream, duplicate: false })),
  );
}
for (let i = 0; i < 50; i++) await readTail(db, START, 1000, own); // warm the JIT and the plan
const c0 = process.cpuUsage();
const t0 = performance.now();
let rows = 0;
for (let i = 0; i < pages; i++) rows += (await readTail(db, START, 1000, own)).events.length;
const c = process.cpuUsage(c0);
const wallUs = (performance.now() - t0) * 1000;
console.log(
  `${own ? 'own rows: ' : ''}${((c.user + c.system) / rows).toFixed(3)} µs client CPU per row, ${(wallUs / rows).toFixed(2)} µs wall per row (${rows} rows)`,
);
await pool.end();
