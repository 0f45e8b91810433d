// The SSE sink over a raw Node response (src/http/sse.ts). Its write hands each frame to the socket
// at once instead of leaving it corked until the next tick: a fan-out writes to every subscriber in
// one tick, and frames held that long are promoted to the old generation (the memory per connection
// measured in bench/RESULTS.md). Backpressure must still reach the hub.
import { once } from 'node:events';
import { type IncomingMessage, type ServerResponse, createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { SSE_HEADERS, responseSink } from '../src/http/sse.ts';

/** A server whose one response is an open SSE stream, and the client's side of it. */
async function openStream(t: { teardown(fn: () => unknown): void }): Promise<{
  res: ServerResponse;
  sink: ReturnType<typeof responseSink>;
  client: IncomingMessage;
}> {
  let serverSide: ServerResponse | undefined;
  const server = createServer((_req, res) => {
    res.writeHead(200, SSE_HEADERS);
    res.flushHeaders();
    serverSide = res;
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  const req = request({ port: (server.address() as AddressInfo).port, host: '127.0.0.1', path: '/' });
  req.end();
  const [client] = (await once(req, 'response')) as [IncomingMessage];
  if (!serverSide) throw new Error('the server answered without keeping its response');
  return { res: serverSide, sink: responseSink(serverSide), client };
}

async function readUntil(client: IncomingMessage, text: string): Promise<string> {
  let got = '';
  for await (const chunk of client) {
    got += String(chunk);
    if (got.includes(text)) return got;
  }
  throw new Error(`the stream ended before ${JSON.stringify(text)}; got ${JSON.stringify(got)}`);
}

t.test('a write reaches the socket in the same tick, not corked until the next', async (t) => {
  const { res, sink, client } = await openStream(t);
  const socket = res.socket;
  if (!socket) throw new Error('the response has no socket');
  t.equal(sink.write('id: 1\ndata: {"n":1}\n\n'), true, 'an empty socket takes a small frame');
  // Node's own write corks the socket until the next tick, holding the chunk's four pieces there.
  t.equal(socket.writableCorked, 0, 'the socket is not left corked');
  t.equal(socket.writableLength, 0, 'nothing waits in the socket buffer: the frame went to the kernel');
  t.equal(sink.buffered(), 0, 'the response holds nothing either');
  const got = await readUntil(client, '{"n":1}');
  t.match(got, /id: 1\ndata: \{"n":1\}\n\n/, 'the client reads the frame whole');
});

t.test(
  'backpressure still reaches the caller: write says false and drained() waits for the reader',
  async (t) => {
    const { res, sink, client } = await openStream(t);
    // The client stops reading from its socket (not just from the response), so once the kernel's
    // buffers are full nothing moves until it resumes: client and server share this event loop.
    client.socket.pause();
    // Under the socket's 16 KiB high-water mark, so write() says false only once frames really wait.
    const frame = `data: ${'x'.repeat(8 * 1024)}\n\n`;
    let writes = 0;
    while (sink.write(frame)) {
      writes++;
      if (writes > 100_000) throw new Error('800 MB written to a paused reader and write() never said false');
    }
    t.ok(sink.buffered() > 0, 'the refused write is buffered, not dropped');
    let drained = false;
    const drain = sink.drained().then(() => {
      drained = true;
    });
    for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
    t.equal(drained, false, 'drained() waits while the reader is paused');
    const rest = new Promise<string>((resolve, reject) => {
      let text = '';
      client.on('data', (c) => {
        text += String(c);
      });
      client.on('end', () => resolve(text));
      client.on('error', reject);
    });
    client.socket.resume();
    await drain;
    t.equal(drained, true, 'drained() settles once the reader catches up');
    sink.end('data: last\n\n');
    t.equal(sink.write('data: after end\n\n'), false, 'a write after end is dropped');
    const text = await rest;
    t.equal(text.length, (writes + 1) * frame.length + 'data: last\n\n'.length, 'every frame arrives, once');
    t.ok(text.endsWith('data: last\n\n'), 'the closing frame is the last thing the client reads');
    t.notOk(text.includes('after end'), 'nothing after end reaches the client');
    t.ok(res.writableEnded, 'the response is ended');
  },
);
