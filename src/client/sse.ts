/**
 * A small Server-Sent Events parser (the WHATWG event-stream rules) over any stream of text chunks.
 * Used by the TypeScript client and the tests; unlike the browser's EventSource it also yields
 * messages without data (a `retry:` hint), so callers can track the cursor exactly.
 */
export interface SseMessage {
  /** The `id:` of this message, if it carried one. */
  id?: string;
  /** `event:` name; undefined means the default ("message"). */
  event?: string;
  /** Joined `data:` lines; undefined when the message had no data (an id or retry only). */
  data?: string;
  retry?: number;
}

/**
 * True for the server's priming frame: the connect point as an id, no event (`event: primed` with
 * empty data). A data-less frame with an id is read the same way (servers before the named form).
 */
export function isPrimer(m: SseMessage): boolean {
  // Event data is JSON, never empty: an event a publisher typed `primed` is not mistaken for it.
  return m.id !== undefined && (m.event === 'primed' ? m.data === '' : m.data === undefined);
}

export async function* parseSse(chunks: AsyncIterable<string>): AsyncGenerator<SseMessage> {
  let buffer = '';
  let msg: SseMessage = {};
  let dataLines: string[] | undefined;
  let any = false;
  for await (const chunk of chunks) {
    buffer += chunk;
    let start = 0;
    const eol = /\r\n|\r|\n/g;
    for (;;) {
      eol.lastIndex = start;
      const m = eol.exec(buffer);
      // A trailing CR may be the first half of CRLF: wait for the next chunk.
      if (!m || (m[0] === '\r' && m.index === buffer.length - 1)) break;
      const line = buffer.slice(start, m.index);
      start = m.index + m[0].length;
      if (line === '') {
        if (any) {
          if (dataLines) msg.data = dataLines.join('\n');
          yield msg;
        }
        msg = {};
        dataLines = undefined;
        any = false;
        continue;
      }
      if (line.startsWith(':')) continue; // comment (heartbeat)
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'data') {
        dataLines ??= [];
        dataLines.push(value);
      } else if (field === 'id') msg.id = value;
      else if (field === 'event') msg.event = value;
      else if (field === 'retry' && /^\d+$/.test(value)) msg.retry = Number(value);
      else continue;
      any = true;
    }
    buffer = buffer.slice(start);
  }
}

/**
 * An event id split into its cursor and the stream it names: on a connection to several streams
 * the server writes ids as `<cursor>/<stream>` (`7350-12/orders`); on one stream, the cursor alone.
 */
export function splitEventId(id: string): { cursor: string; stream?: string } {
  const slash = id.indexOf('/');
  return slash === -1 ? { cursor: id } : { cursor: id.slice(0, slash), stream: id.slice(slash + 1) };
}

/** Decodes a fetch Response body into text chunks. */
export async function* textChunks(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      yield decoder.decode(value, { stream: true });
    }
  } finally {
    reader.releaseLock();
  }
}
