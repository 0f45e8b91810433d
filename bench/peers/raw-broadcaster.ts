// Fan-out peer of scenario 4: the floor for SSE fan-out on node:http, with nothing but the fan-out.
// A publish is parsed, its frame built once, and appended to a per-subscriber buffer of every
// subscriber of that stream; one setImmediate per event-loop turn flushes each touched subscriber
// with a single write (frames coalesced per subscriber per tick, as commitfeed's hub does per page).
// It keeps no history (no resume, no catch-up), ignores backpressure (a slow reader's frames pile up
// in its socket buffer) and never touches a database: the cost of every guarantee commitfeed keeps
// is the gap between the two in scenario 4.
//
// Same HTTP surface as the bench expects of commitfeed: POST /v1/streams/:s/events (201), GET of the
// same path as SSE with a primed `id:`, GET /readyz. Env: PORT (default 3212).
import http from 'node:http';

const port = Number(process.env['PORT'] ?? 3212);

interface Sub {
  res: http.ServerResponse;
  pending: string;
}

const byStream = new Map<string, Set<Sub>>();
let touched: Sub[] = [];
let flushQueued = false;
let seq = 0;

function flush(): void {
  flushQueued = false;
  const subs = touched;
  touched = [];
  for (const sub of subs) {
    const chunk = sub.pending;
    sub.pending = '';
    if (!sub.res.destroyed) sub.res.write(chunk);
  }
}

function broadcast(stream: string, frame: string): void {
  const subs = byStream.get(stream);
  if (subs === undefined) return;
  for (const sub of subs) {
    if (sub.pending === '') touched.push(sub);
    sub.pending += frame;
  }
  if (!flushQueued && touched.length > 0) {
    flushQueued = true;
    setImmediate(flush);
  }
}

function send(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

function subscribe(stream: string, req: http.IncomingMessage, res: http.ServerResponse): void {
  res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
  });
  res.write(`retry: 1000\nid: ${seq}\nevent: primed\ndata:\n\n`);
  const sub: Sub = { res, pending: '' };
  const set = byStream.get(stream) ?? new Set<Sub>();
  byStream.set(stream, set);
  set.add(sub);
  req.on('close', () => {
    set.delete(sub);
    if (set.size === 0 && byStream.get(stream) === set) byStream.delete(stream);
  });
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://localhost');
  if (url.pathname === '/readyz') return send(res, 200, { ok: true });
  const m = /^\/v1\/streams\/([^/]+)\/events$/.exec(url.pathname);
  if (!m) return send(res, 404, { statusCode: 404, error: 'Not Found', message: 'no such route' });
  const stream = decodeURIComponent(m[1]);
  if (req.method === 'GET') return subscribe(stream, req, res);
  if (req.method !== 'POST')
    return send(res, 405, { statusCode: 405, error: 'Method Not Allowed', message: '' });
  const parts: Buffer[] = [];
  req.on('data', (c: Buffer) => parts.push(c));
  req.on('end', () => {
    let input: { type?: string; data: unknown };
    try {
      input = JSON.parse(Buffer.concat(parts).toString('utf8')) as typeof input;
    } catch {
      return send(res, 400, { statusCode: 400, error: 'Bad Request', message: 'body is not JSON' });
    }
    const id = String(++seq);
    const type = input.type ?? 'message';
    broadcast(stream, `id: ${id}\nevent: ${type}\ndata: ${JSON.stringify(input.data)}\n\n`);
    send(res, 201, { id, stream });
  });
});
server.keepAliveTimeout = 60_000;
server.listen(port, '127.0.0.1', () => console.error(`raw-broadcaster: listening on 127.0.0.1:${port}`));

const shutdown = () => {
  server.close();
  server.closeAllConnections();
  process.exit(0);
};
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
