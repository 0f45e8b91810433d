// Counts the statements a process sends through node-postgres, by statement text, for
// bench/experiments/queue-profile.ts. Loaded with `node --import` (plain JavaScript: it runs before
// tsx's hooks); with STATEMENT_COUNTS_DIR set, every pg.Client#query is counted (a prepared
// statement's PREPARE and EXECUTE count once: one query call), and SIGUSR2 writes the counts so far
// to <dir>/<pid>.json.
// Every package here resolves the same node_modules/pg, so the server's pool, graphile-worker's and
// pg-boss's are all counted.
import { writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const dir = process.env.STATEMENT_COUNTS_DIR;
if (dir) {
  const pg = createRequire(`${process.cwd()}/`)('pg');
  const counts = new Map();
  const query = pg.Client.prototype.query;
  pg.Client.prototype.query = function (config, values, callback) {
    const text = typeof config === 'string' ? config : config?.text;
    if (typeof text === 'string') {
      const key = text.replace(/\s+/g, ' ').trim().slice(0, 120);
      counts.set(key, (counts.get(key) ?? 0) + 1);
    }
    return query.call(this, config, values, callback);
  };
  process.on('SIGUSR2', () => {
    writeFileSync(`${dir}/${process.pid}.json`, JSON.stringify(Object.fromEntries(counts)));
  });
}
