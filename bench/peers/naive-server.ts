// Peer (a)/(b) of the bench: the design commitfeed avoids, built the obvious way.
// Every publish is its own transaction: BEGIN; INSERT ... RETURNING id; pg_notify; COMMIT
// (four round trips, one notifying commit each). `?notify=0` skips the notify (peer b).
// `?nodb=1` answers 201 without touching the database (peer e, the HTTP ceiling): what node:http,
// JSON parsing and the load generator cost on this machine before any server does any work.
// Readers poll `WHERE id > cursor` every 50 ms per subscriber (the seed design), which also loses
// events: a row whose transaction commits after a higher id was read is skipped for good
// (docs/architecture.md#why-the-feed-is-read-by-transaction-id); scenario 6 shows it.
//
// Env: DATABASE_URL, PORT (default 3100), NAIVE_POOL_SIZE (10), NAIVE_POLL_INTERVAL (50ms; a duration
// with a unit, as commitfeed's own settings).
import http from 'node:http';
import pg from 'pg';
import { parseDuration } from '../../src/config/settings.ts';

const port = Number(process.env['PORT'] ?? 3100);
const pollMs = parseDuration(process.env['NAIVE_POLL_INTERVAL'] || '50ms');
if (pollMs === undefined || pollMs < 1)
  throw new Error('naive-server: NAIVE_POLL_INTERVAL must be a duration such as 50ms');
const poolSize = Number(process.env['NAIVE_POOL_SIZE'] ?? 10);
const connectionString = process.env['DATABASE_URL'];
if (!connectionString) throw new Error('naive-server: set DATABASE_URL');

const writers = new pg.Pool({ connectionString, max: poolSize });
const readers = new pg.Pool({ connectionString, max: poolSize });
for (const pool of [writers, readers]) {
  pool.on('error', (err) => console.error('naive-server: idle client error', err.message));
  pool.on('connect', (client) =>
    client.on('error', (err) => console.error('naive-server: client error', err.message)),
  );
}

await writers.query(`
  CREATE SCHEMA IF NOT EXISTS naive;
  CREATE TABLE IF NOT EXISTS naive.feed (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    txid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    stream text NOT NULL,
    type text NOT NULL DEFAULT 'message',
    key text,
    data json NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
  );
  CREATE INDEX IF NOT EXISTS feed_stream_id ON naive.feed (stream, id);
`);

function send(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

interface Input {
  data: unknown;
  type?: string;
  key?: string;
}

async function publish(stream: string, input: Input, notify: boolean): Promise<string> {
  const client = await writers.connect();
  try {
    await client.query('BEGIN');
    const { rows } = await client.query<{ id: string }>(
      'INSERT INTO naive.feed (stream, type, key, data) VALUES ($1, $2, $3, $4) RETURNING id::text AS id',
      [stream, input.type ?? 'message', input.key ?? null, JSON.stringify(input.data)],
    );
    if (notify) await client.query(`SELECT pg_notify('naive_feed', $1)`, [stream]);
    await client.query('COMMIT');
    return rows[0].id;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}

function subscribe(stream: string, url: URL, req: http.IncomingMessage, res: http.ServerResponse): void {
  let cursor = '0';
  let closed = false;
  let timer: NodeJS.Timeout | undefined;
  req.on('close', () => {
    closed = true;
    clearTimeout(timer);
  });
  const poll = async () => {
    if (closed) return;
    try {
      const { rows } = await readers.query<{ id: string; type: string; data: string }>(
        'SELECT id::text AS id, type, data::text AS data FROM naive.feed WHERE stream = $1 AND id > $2 ORDER BY feed.id LIMIT 1000',
        [stream, cursor],
      );
      let out = '';
      for (const r of rows) out += `id: ${r.id}\nevent: ${r.type}\ndata: ${r.data}\n\n`;
      if (rows.length > 0) {
        cursor = rows[rows.length - 1].id;
        res.write(out);
      }
    } catch (err) {
      console.error('naive-server: poll failed', (err as Error).message);
    }
    if (!closed) timer = setTimeout(poll, pollMs);
  };
  const start = async () => {
    const after = url.searchParams.get('after') ?? req.headers['last-event-id'];
    if (typeof after === 'string' && after !== '') cursor = after;
    else if (url.searchParams.get('from') !== 'earliest') {
      const { rows } = await readers.query<{ id: string }>(
        'SELECT coalesce(max(id), 0)::text AS id FROM naive.feed WHERE stream = $1',
        [stream],
      );
      cursor = rows[0].id;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.write(`retry: 1000\nid: ${cursor}\n\n`);
    timer = setTimeout(poll, pollMs);
  };
  start().catch((err: Error) =>
    send(res, 503, { statusCode: 503, error: 'Service Unavailable', message: err.message }),
  );
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://localhost');
  if (url.pathname === '/readyz') return send(res, 200, { ok: true });
  const m = /^\/v1\/streams\/([^/]+)\/events$/.exec(url.pathname);
  if (!m) return send(res, 404, { statusCode: 404, error: 'Not Found', message: 'no such route' });
  const stream = decodeURIComponent(m[1]);
  if (req.method === 'GET') return subscribe(stream, url, req, res);
  if (req.method !== 'POST')
    return send(res, 405, { statusCode: 405, error: 'Method Not Allowed', message: '' });
  const parts: Buffer[] = [];
  req.on('data', (c: Buffer) => parts.push(c));
  req.on('end', () => {
    let input: Input;
    try {
      input = JSON.parse(Buffer.concat(parts).toString('utf8')) as Input;
    } catch {
      return send(res, 400, { statusCode: 400, error: 'Bad Request', message: 'body is not JSON' });
    }
    if (url.searchParams.get('nodb') === '1') return send(res, 201, { id: '0-0', stream });
    publish(stream, input, url.searchParams.get('notify') !== '0').then(
      (id) => send(res, 201, { id, stream }),
      (err: Error) => send(res, 503, { statusCode: 503, error: 'Service Unavailable', message: err.message }),
    );
  });
});
server.keepAliveTimeout = 60_000;
server.listen(port, '127.0.0.1', () => console.error(`naive-server: listening on 127.0.0.1:${port}`));

const shutdown = () => {
  server.close();
  server.closeAllConnections();
  Promise.all([writers.end(), readers.end()]).finally(() => process.exit(0));
};
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
