// What the feed's tag costs a catch-up page built by PostgreSQL (src/feed/frames.ts): the same
// 1000-frame pages read with and without the tag argument, alternating, in one run. Prints the
// median milliseconds per page of each and the median server-side (EXPLAIN ANALYZE) execution time.
//   npx tsx bench/frames-tag.ts postgres://postgres@127.0.0.1:5432/<your db>   (rows are added)
import { CompiledQuery, Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import type { Database } from '../src/db/database.ts';
import { migrate } from '../src/db/migrate.ts';
import { START } from '../src/feed/cursor.ts';
import { currentHorizon } from '../src/feed/queries/current-horizon.ts';
import { readRangeFrames } from '../src/feed/queries/read-range-frames.ts';

const url = process.argv[2];
if (!url) throw new Error('usage: npx tsx bench/frames-tag.ts <database url>');
const db = new Kysely<Database>({
  dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 1 }) }),
});
await migrate(db);
await sql`insert into commitfeed.feed (stream, type, data)
          select 'bench', 'created', json_build_object('n', g, 'pad', repeat('x', 100))
          from generate_series(1, 100000) g`.execute(db);
await sql`analyze commitfeed.feed`.execute(db);
const upTo = await currentHorizon(db);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const times: Record<string, number[]> = { untagged: [], tagged: [] };
for (let round = 0; round < 30; round++) {
  for (const [name, suffix] of [
    ['untagged', ''],
    ['tagged', '.0123abcd'],
  ] as const) {
    let after = START;
    const t0 = process.hrtime.bigint();
    for (let p = 0; p < 20; p++) {
      const page = await readRangeFrames(db, ['bench'], after, upTo, 1000, 1 << 20, suffix);
      after = page.last!;
    }
    times[name].push(Number(process.hrtime.bigint() - t0) / 1e6 / 20);
  }
}
const explain = async (suffix: string) => {
  const { rows } = await db.executeQuery<{ 'QUERY PLAN': string }>(
    CompiledQuery.raw(
      `explain (analyze, format text) select string_agg('id: ' || f.txid::text || '-' || f.id::text || $1::text || E'\\n' || 'data: ' || f.data::text || E'\\n\\n', '') from (select * from commitfeed.feed f where f.stream = 'bench' order by f.txid, f.id limit 20000) f`,
      [suffix],
    ),
  );
  const line = rows.map((r) => r['QUERY PLAN']).find((l) => l.startsWith('Execution Time')) ?? '';
  return Number(/([\d.]+) ms/.exec(line)?.[1]);
};
const server: Record<string, number[]> = { untagged: [], tagged: [] };
for (let round = 0; round < 15; round++) {
  server.untagged.push(await explain(''));
  server.tagged.push(await explain('.0123abcd'));
}
for (const name of ['untagged', 'tagged'] as const) {
  console.log(
    `${name}: median ${median(times[name]).toFixed(3)} ms per 1000-frame page (30 rounds x 20 pages)`,
  );
}
for (const name of ['untagged', 'tagged'] as const) {
  console.log(
    `${name}: server execution median ${median(server[name]).toFixed(2)} ms per 20000 frames (15 rounds)`,
  );
}
await db.destroy();
