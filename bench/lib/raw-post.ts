// A minimal keep-alive HTTP/1.1 POST client over raw sockets, for the open-loop publisher.
//
// Why not node:http: the load generator shares the machine's two cores with the server under test
// and its database. Measured in scenario 3 (1,000 single-event publishes/s), the publisher process
// built on http.request + a keep-alive Agent used 0.34–0.39 cores, as much as a third of the whole
// commitfeed process beside it: CPU taken from the system being measured. Like the raw-socket SSE
// client of the subscribers (sse-client.ts), this one does only what the bench needs: one request at
// a time per connection (no pipelining, as with an Agent), a Content-Length or chunked response body,
// and a timeout.
import net from 'node:net';

export interface PostResult {
  status: number;
  body: string;
}

interface InFlight {
  resolve(r: PostResult): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout;
}

const TIMEOUT_MS = 10_000;

class Conn {
  readonly socket: net.Socket;
  /** The response being read (latin1: one character per byte, so lengths are byte counts). */
  buf = '';
  req: InFlight | undefined;
  closed = false;

  constructor(
    port: number,
    private readonly onIdle: (c: Conn) => void,
    private readonly onGone: (c: Conn) => void,
  ) {
    this.socket = net.connect({ host: '127.0.0.1', port });
    this.socket.setNoDelay(true);
    this.socket.setEncoding('latin1');
    this.socket.on('data', (s: string) => this.onData(s));
    this.socket.on('error', (e) => this.fail(e));
    this.socket.on('close', () => this.fail(new Error('connection closed by the server')));
  }

  send(head: string, body: string, req: InFlight): void {
    this.req = req;
    this.buf = '';
    this.socket.write(head + body);
  }

  fail(err: Error): void {
    if (this.closed) return;
    this.closed = true;
    this.socket.destroy();
    const req = this.req;
    this.req = undefined;
    if (req) {
      clearTimeout(req.timer);
      req.reject(err);
    }
    this.onGone(this);
  }

  private onData(s: string): void {
    this.buf += s;
    const headEnd = this.buf.indexOf('\r\n\r\n');
    if (headEnd < 0) return;
    const head = this.buf.slice(0, headEnd);
    const start = headEnd + 4;
    let body: string | undefined;
    const length = /\r\ncontent-length:\s*(\d+)/i.exec(head);
    if (length) {
      const end = start + Number(length[1]);
      if (this.buf.length < end) return;
      body = this.buf.slice(start, end);
    } else if (/\r\ntransfer-encoding:\s*chunked/i.test(head)) {
      body = dechunk(this.buf, start);
      if (body === undefined) return;
    } else body = '';
    const req = this.req;
    this.req = undefined;
    this.buf = '';
    if (req) {
      clearTimeout(req.timer);
      req.resolve({ status: Number(head.slice(9, 12)), body: Buffer.from(body, 'latin1').toString('utf8') });
    }
    if (/\r\nconnection:\s*close/i.test(head)) this.fail(new Error('connection: close'));
    else this.onIdle(this);
  }
}

/** The body of a chunked response starting at `from`, or undefined while it is incomplete. */
function dechunk(s: string, from: number): string | undefined {
  let out = '';
  let i = from;
  for (;;) {
    const eol = s.indexOf('\r\n', i);
    if (eol < 0) return undefined;
    const size = Number.parseInt(s.slice(i, eol), 16);
    if (size === 0) return s.indexOf('\r\n', eol + 2) < 0 ? undefined : out;
    if (s.length < eol + 2 + size + 2) return undefined;
    out += s.slice(eol + 2, eol + 2 + size);
    i = eol + 2 + size + 2;
  }
}

/** POSTs over at most `maxConns` keep-alive connections to 127.0.0.1:`port`; requests beyond wait in order. */
export class RawPoster {
  private readonly idle: Conn[] = [];
  private readonly conns = new Set<Conn>();
  private readonly queue: { head: string; body: string; req: InFlight }[] = [];

  constructor(
    private readonly port: number,
    private readonly maxConns: number,
    /** A server under valgrind (bench/experiments/instructions.ts) needs longer. */
    private readonly timeoutMs = TIMEOUT_MS,
  ) {}

  post(path: string, body: string, contentType = 'application/json', extra = ''): Promise<PostResult> {
    const head =
      `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1:${this.port}\r\nContent-Type: ${contentType}\r\n${extra}` +
      `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n`;
    return new Promise((resolve, reject) => {
      const req: InFlight = { resolve, reject, timer: undefined as unknown as NodeJS.Timeout };
      req.timer = setTimeout(() => {
        const c = [...this.conns].find((x) => x.req === req);
        if (c) c.fail(new Error(`request timed out after ${this.timeoutMs / 1000} s`));
        else {
          const k = this.queue.findIndex((q) => q.req === req);
          if (k >= 0) this.queue.splice(k, 1);
          reject(new Error(`request timed out after ${this.timeoutMs / 1000} s (waiting for a connection)`));
        }
      }, this.timeoutMs);
      const c = this.idle.pop() ?? this.open();
      if (c) c.send(head, body, req);
      else this.queue.push({ head, body, req });
    });
  }

  private open(): Conn | undefined {
    if (this.conns.size >= this.maxConns) return undefined;
    const c = new Conn(
      this.port,
      (x) => this.next(x),
      (x) => {
        this.conns.delete(x);
        const k = this.idle.indexOf(x);
        if (k >= 0) this.idle.splice(k, 1);
        // A request waiting for a connection gets a new one.
        const q = this.queue.shift();
        if (q) {
          const n = this.open();
          if (n) n.send(q.head, q.body, q.req);
          else this.queue.unshift(q);
        }
      },
    );
    this.conns.add(c);
    return c;
  }

  private next(c: Conn): void {
    const q = this.queue.shift();
    if (q) c.send(q.head, q.body, q.req);
    else this.idle.push(c);
  }

  close(): void {
    for (const c of [...this.conns]) c.fail(new Error('client closed'));
  }
}
