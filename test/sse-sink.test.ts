// The SSE sink over a raw Node response (src/http/sse.ts). Its write hands each frame to the socket
// at once instead of leaving it corked until the next tick: a fan-out writes to every subscriber in
// one tick, and frames held that long are promoted to the old generation (the memory per connection
// measured in bench/HISTORY.md, "Fan-out memory, round two"). Backpressure must still reach the hub.
// What the slow-reader sweep reads of the socket (its bytes in flight) counts each byte once, and its
// reset frees the kernel's queue at once.
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { type IncomingMessage, type ServerResponse, createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { parseSendQueues } from '../src/feed/send-queues.ts';
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

/** The server sockets' send queues now (inode → bytes), and whether `inode` is listed at all. */
function kernelTable(inode: number): { queued: number; listed: boolean } {
  const queues = new Map<number, number>();
  const table = readFileSync('/proc/net/tcp', 'latin1');
  parseSendQueues(table, queues);
  return { queued: queues.get(inode) ?? 0, listed: new RegExp(` ${inode} `).test(table) };
}

t.test(
  "bytes in flight: Node's unsent bytes and the kernel's queue, each counted once; a reset frees the queue at once",
  { skip: process.platform !== 'linux' && 'the kernel queue is read from /proc/net/tcp' },
  async (t) => {
    const { res, sink, client } = await openStream(t);
    const socket = res.socket;
    if (!socket) throw new Error('the response has no socket');
    client.socket.pause();
    // One large write the kernel takes in part (as a fan-out's page to a full socket), then more.
    sink.write(`data: ${'x'.repeat(4 * 1024 * 1024)}\n\n`);
    for (let i = 0; i < 4; i++) sink.write(`data: ${'y'.repeat(8 * 1024)}\n\n`);
    const { inode } = sink.socketId();
    t.ok(inode > 0, 'the socket has an inode');
    // Let the kernel settle: the client's window fills, then nothing moves.
    let last = -1;
    for (let i = 0; i < 50 && kernelTable(inode).queued !== last; i++) {
      last = kernelTable(inode).queued;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const { queued } = kernelTable(inode);
    const { unsent, handed } = sink.socketBytes();
    t.ok(queued > 64 * 1024, `the kernel holds a queue (${queued} bytes)`);
    t.ok(unsent > 0, `and Node the rest (${unsent} bytes)`);
    t.equal(unsent + handed, socket.bytesWritten, 'what Node holds and what the kernel took: all of it');
    const acked = handed - queued;
    t.ok(acked >= 0 && acked < 8 * 1024 * 1024, `the client acknowledged ${acked} bytes (into its buffer)`);
    t.ok(
      unsent + queued <= socket.bytesWritten,
      `in flight (${unsent + queued}) counts the partly taken write once (writableLength: ${res.writableLength})`,
    );

    // Node's HTTP client reports the reset on the response (aborted, then an ECONNRESET error).
    const reset = new Promise<string | undefined>((resolve) => {
      client.on('error', (err: NodeJS.ErrnoException) => resolve(err.code));
      client.on('end', () => resolve('end'));
      client.on('close', () => resolve(undefined));
    });
    sink.reset();
    // Closed with a FIN instead, it would stay listed in FIN_WAIT1 with its queue while the client
    // does not read (minutes).
    for (let i = 0; i < 50 && kernelTable(inode).listed; i++) await new Promise((r) => setTimeout(r, 10));
    t.equal(kernelTable(inode).listed, false, 'the server side is gone from the kernel table at once');
    client.resume();
    client.socket.resume();
    t.equal(await reset, 'ECONNRESET', 'the client sees a reset, not an end of stream');
  },
);
