// The tail read's client-side cost: node-postgres parsing plus toEvent, per row, for full pages.
// `DATABASE_URL=postgres://… npx tsx bench/tail-cpu.ts [pages]` against a database holding at
// least 1,000 events (any commitfeed database after a batched bench). It reads the same first page
// over and over, so PostgreSQL's side stays the same and only this process's CPU is compared.
import { createDatabase } from '../src/db/database.ts';
import { START } from '../src/feed/cursor.ts';
import { readTail } from '../src/feed/queries/read-tail.ts';

const url = process.env.DATABASE_URL;
if (!url) throw new Error('set DATABASE_URL to a commitfeed database with at least 1,000 events');
const pages = Number(process.argv[2] ?? 300);
const { db, pool } = createDatabase({
  url,
  poolSize: 1,
  statementTimeoutMs: 30_000,
  log: { warn: () => {}, error: () => {} },
});
for (let i = 0; i < 50; i++) await readTail(db, START, 1000); // warm the JIT and the plan
const c0 = process.cpuUsage();
const t0 = performance.now();
let rows = 0;
for (let i = 0; i < pages; i++) rows += (await readTail(db, START, 1000)).events.length;
const c = process.cpuUsage(c0);
const wallUs = (performance.now() - t0) * 1000;
console.log(
  `${((c.user + c.system) / rows).toFixed(3)} µs client CPU per row, ${(wallUs / rows).toFixed(2)} µs wall per row (${rows} rows)`,
);
await pool.end();
