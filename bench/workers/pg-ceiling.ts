// The database's own ceiling for batched publish: K connections, each looping one statement that
// inserts a batch of rows (unnest of arrays, so one plan for any size) and notifies, as a single
// implicit transaction — one round trip and one notifying commit per batch. No HTTP, no JSON
// parsing: what any server on top of this database can at best approach.
import pg from 'pg';
import { serveJobs } from '../lib/proc.ts';
import { monoMs, Recorder } from '../lib/stats.ts';

export interface CeilingArgs {
  databaseUrl: string;
  connections: number;
  batch: number;
  durationSec: number;
  /** The `data` of each row, as JSON text. */
  data: string;
}

export interface CeilingResult {
  transactions: number;
  events: number;
  eventsPerSec: number;
  errors: number;
  firstError?: string;
  latency: ReturnType<Recorder['summary']>;
}

const SQL = `WITH ins AS (
  INSERT INTO bench_ceiling.feed (stream, type, key, data)
  SELECT 'ceiling', 'bench', NULL, d FROM unnest($1::json[]) AS d
)
SELECT pg_notify('bench_ceiling', '')`;

serveJobs(async (args) => {
  const a = args as CeilingArgs;
  const rows = Array.from({ length: a.batch }, () => a.data);
  const clients = Array.from(
    { length: a.connections },
    () => new pg.Client({ connectionString: a.databaseUrl }),
  );
  for (const c of clients) c.on('error', () => {});
  await Promise.all(clients.map((c) => c.connect()));
  const lat = new Recorder();
  let tx = 0;
  let errors = 0;
  let firstError: string | undefined;
  const start = monoMs();
  const deadline = start + a.durationSec * 1000;
  await Promise.all(
    clients.map(async (c) => {
      while (monoMs() < deadline) {
        const t = monoMs();
        try {
          await c.query({ name: 'ceiling', text: SQL, values: [rows] });
          lat.add(monoMs() - t);
          tx++;
        } catch (err) {
          errors++;
          firstError ??= (err as Error).message;
          if (errors > 100) return;
        }
      }
    }),
  );
  const elapsed = (monoMs() - start) / 1000;
  await Promise.all(clients.map((c) => c.end()));
  const result: CeilingResult = {
    transactions: tx,
    events: tx * a.batch,
    eventsPerSec: (tx * a.batch) / elapsed,
    errors,
    firstError,
    latency: lat.summary(),
  };
  return result;
});
