// Peer `floor` of scenarios 1 and 3: the no-database HTTP + SSE floor. A tiny Fastify server whose
// POST builds the event's frame once and hands it to the open SSE responses of that stream, in the
// same tick, one write each (as commitfeed's hub writes a page), then answers 201. No database, no
// history, no resume, no backpressure, no checks beyond Fastify's JSON parser: what the same bench
// client measures for HTTP in, an SSE write out and the machine, before any guarantee is kept.
// In scenario 1 (no subscribers) it is the bare Fastify handler: route, JSON body, a 201 answer.
//
// With FLOOR_DATABASE_URL it is peer `floor-commit`, the durable floor: the POST first writes the event
// to PostgreSQL, one autocommit insert into an unindexed table per request from a bare pg pool (the
// commit's WAL flush, nothing else: no grouping, no notify, no order, no read), and fans out once that
// returns. What a publish must wait for before anyone may see it, on the same machine in the same run.
//
// Same HTTP surface as the bench expects of commitfeed: POST /v1/streams/:stream/events (201
// {id, stream}), GET of the same path as SSE with a primed `id:`, GET /readyz. Env: PORT (default 3213);
// FLOOR_TRACE_OUT: a file where, at exit, the percentiles of the two server-side stages of scenario 3's
// events are written (publisher stamp → handler, handler → frames written), as bench/lib/trace-stages.mjs
// does for commitfeed.
import { writeFileSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import Fastify from 'fastify';
import pg from 'pg';

const traceOut = process.env['FLOOR_TRACE_OUT'];
/** One list of stage times per measured run (a pause of 1.5 s starts the next). */
const traced: { http: number; fanout: number }[][] = [];
let lastTraced = 0;
const mono = () => Number(process.hrtime.bigint()) / 1e6;
if (traceOut)
  process.on('exit', () => {
    const pct = (xs: number[], q: number) => xs[Math.min(xs.length - 1, Math.floor(q * xs.length))];
    const stage = (xs: number[]) => {
      xs.sort((a, b) => a - b);
      return { count: xs.length, p50: pct(xs, 0.5), p90: pct(xs, 0.9), p99: pct(xs, 0.99) };
    };
    const runs = traced.map((run) => ({
      http: stage(run.map((x) => x.http)),
      fanout: stage(run.map((x) => x.fanout)),
      server: stage(run.map((x) => x.http + x.fanout)),
    }));
    writeFileSync(traceOut, JSON.stringify(runs, null, 1));
  });

const port = Number(process.env['PORT'] ?? 3213);
const databaseUrl = process.env['FLOOR_DATABASE_URL'];
/** The durable floor's pool: as many connections as the publisher keeps requests in flight. */
const pool = databaseUrl ? new pg.Pool({ connectionString: databaseUrl, max: 64 }) : undefined;
pool?.on('error', (err) => console.error(`floor-server: pool: ${err.message}`));
if (pool) {
  await pool.query('drop table if exists bench_floor_events');
  await pool.query('create table bench_floor_events (stream text not null, data json not null)');
}
const INSERT = {
  name: 'floor-insert',
  text: 'insert into bench_floor_events (stream, data) values ($1, $2)',
};
const byStream = new Map<string, Set<ServerResponse>>();
let seq = 0;

const app = Fastify({ logger: false, forceCloseConnections: true });

app.get('/readyz', async () => ({ ok: true }));

app.post<{ Params: { stream: string }; Body: { type?: string; data: unknown } }>(
  '/v1/streams/:stream/events',
  async (request, reply) => {
    const { stream } = request.params;
    if (pool) await pool.query({ ...INSERT, values: [stream, JSON.stringify(request.body.data)] });
    const id = String(++seq);
    const subs = byStream.get(stream);
    if (subs !== undefined) {
      const start = traceOut ? mono() : 0;
      const body = request.body;
      const frame = `id: ${id}\nevent: ${body.type ?? 'message'}\ndata: ${JSON.stringify(body.data)}\n\n`;
      for (const res of subs) if (!res.destroyed) res.write(frame);
      const t = (body.data as { t?: number } | null)?.t;
      if (traceOut && typeof t === 'number' && !stream.endsWith('-warm')) {
        const end = mono();
        if (end - lastTraced > 1500) traced.push([]);
        lastTraced = end;
        traced[traced.length - 1].push({ http: start - t, fanout: end - start });
      }
    }
    return reply.code(201).send({ id, stream });
  },
);

app.get<{ Params: { stream: string } }>('/v1/streams/:stream/events', (request, reply) => {
  const { stream } = request.params;
  reply.hijack();
  const res = reply.raw;
  res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
  });
  res.write(`retry: 1000\nid: ${seq}\nevent: primed\ndata:\n\n`);
  const set = byStream.get(stream) ?? new Set<ServerResponse>();
  byStream.set(stream, set);
  set.add(res);
  res.on('close', () => {
    set.delete(res);
    if (set.size === 0 && byStream.get(stream) === set) byStream.delete(stream);
  });
});

app.server.keepAliveTimeout = 60_000;
await app.listen({ port, host: '127.0.0.1' });
console.error(`floor-server: listening on 127.0.0.1:${port}`);

const shutdown = () => {
  void app
    .close()
    .then(() => pool?.end())
    .finally(() => process.exit(0));
};
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
