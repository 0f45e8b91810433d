// A minimal SSE client over a raw TCP socket. The bench holds up to 10,000 of these in one
// process, so it skips node:http (an IncomingMessage, a parser and listeners per socket) and
// decodes the few things it needs by hand: the status line, chunked transfer coding, and the
// SSE fields id/event/data (comments and retry are skipped).
import net from 'node:net';

export interface SseHandlers {
  /** A frame with data. */
  onEvent(id: string | undefined, type: string | undefined, data: string): void;
  /** The priming frame (`event: primed`, empty data, or no data at all): the cursor at connect. */
  onPrimed?(id: string): void;
  /** The response headers arrived with status 200. */
  onOpen?(): void;
  /** Any failure: a non-200 status (with the body), a socket error, or the stream ending. */
  onClose?(reason: string): void;
}

export interface SseOptions {
  host: string;
  port: number;
  path: string;
  lastEventId?: string;
}

export class SseConnection {
  private socket: net.Socket;
  private head = '';
  private headDone = false;
  private status = 0;
  private chunked = false;
  // chunked decoding state: bytes left in the current chunk, or -1 while reading a size line
  private chunkLeft = -1;
  private sizeLine = '';
  private skipCrlf = 0;
  // SSE parsing state
  private pending = '';
  private id: string | undefined;
  private type: string | undefined;
  private data: string[] = [];
  private hasId = false;
  private closed = false;
  private errorBody = '';

  constructor(
    opts: SseOptions,
    private readonly h: SseHandlers,
  ) {
    this.socket = net.connect({ host: opts.host, port: opts.port });
    this.socket.setNoDelay(true);
    this.socket.setEncoding('latin1');
    let req =
      `GET ${opts.path} HTTP/1.1\r\nHost: ${opts.host}:${opts.port}\r\n` +
      'Accept: text/event-stream\r\nCache-Control: no-cache\r\n';
    if (opts.lastEventId !== undefined) req += `Last-Event-ID: ${opts.lastEventId}\r\n`;
    this.socket.write(req + '\r\n');
    this.socket.on('data', (s: string) => this.onData(s));
    this.socket.on('error', (e) => this.close(`socket error: ${e.message}`));
    this.socket.on('close', () => this.close(this.status === 200 ? 'stream closed by server' : 'closed'));
  }

  close(reason = 'closed by client'): void {
    if (this.closed) return;
    this.closed = true;
    this.socket.destroy();
    const why =
      this.status !== 200 && this.status !== 0
        ? `HTTP ${this.status}: ${this.errorBody.slice(0, 300)}`
        : reason;
    this.h.onClose?.(why);
  }

  private onData(s: string): void {
    if (!this.headDone) {
      this.head += s;
      const end = this.head.indexOf('\r\n\r\n');
      if (end < 0) return;
      const headers = this.head.slice(0, end);
      const rest = this.head.slice(end + 4);
      this.head = '';
      this.headDone = true;
      this.status = Number(headers.slice(9, 12));
      this.chunked = /\r\ntransfer-encoding:\s*chunked/i.test(headers);
      if (this.status === 200) this.h.onOpen?.();
      if (rest) this.onBody(rest);
      return;
    }
    this.onBody(s);
  }

  private onBody(s: string): void {
    if (!this.chunked) {
      this.onText(s);
      return;
    }
    let i = 0;
    while (i < s.length) {
      if (this.skipCrlf > 0) {
        const n = Math.min(this.skipCrlf, s.length - i);
        this.skipCrlf -= n;
        i += n;
        continue;
      }
      if (this.chunkLeft < 0) {
        const nl = s.indexOf('\n', i);
        if (nl < 0) {
          this.sizeLine += s.slice(i);
          return;
        }
        this.sizeLine += s.slice(i, nl);
        i = nl + 1;
        const size = Number.parseInt(this.sizeLine, 16);
        this.sizeLine = '';
        if (!(size > 0)) {
          this.close('stream ended (last chunk)');
          return;
        }
        this.chunkLeft = size;
        continue;
      }
      const n = Math.min(this.chunkLeft, s.length - i);
      this.onText(s.slice(i, i + n));
      i += n;
      this.chunkLeft -= n;
      if (this.chunkLeft === 0) {
        this.chunkLeft = -1;
        this.skipCrlf = 2;
      }
    }
  }

  private onText(s: string): void {
    if (this.status !== 200) {
      this.errorBody += s;
      return;
    }
    let text = this.pending + s;
    let start = 0;
    for (;;) {
      const nl = text.indexOf('\n', start);
      if (nl < 0) break;
      let end = nl;
      if (end > start && text.charCodeAt(end - 1) === 13) end--;
      this.onLine(text.slice(start, end));
      start = nl + 1;
    }
    this.pending = start === 0 ? text : text.slice(start);
    text = '';
  }

  private onLine(line: string): void {
    if (line === '') {
      // The priming frame: the connect point as an id, with an empty `data:` (event `primed`).
      const primer = this.type === 'primed' && this.data.length === 1 && this.data[0] === '';
      if (this.data.length > 0 && !primer) {
        const data = this.data.length === 1 ? this.data[0] : this.data.join('\n');
        this.h.onEvent(this.id, this.type, data);
      } else if (this.hasId && this.id !== undefined) this.h.onPrimed?.(this.id);
      this.data = [];
      this.type = undefined;
      this.hasId = false;
      return;
    }
    if (line.charCodeAt(0) === 58) return; // ':' comment / heartbeat
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'id') {
      this.id = value;
      this.hasId = true;
    } else if (field === 'event') this.type = value;
  }
}
