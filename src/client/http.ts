/**
 * The client's HTTP core: the base URL, the headers every request carries (the bearer token among
 * them), one JSON request, and the SSE request a `Subscription` opens. CommitfeedClient builds on it.
 */
import { errorFrom, networkError } from './errors.ts';

export interface ClientOptions {
  /** Base URL of the service, e.g. `http://127.0.0.1:3000`. */
  url: string;
  /** Sent as `Authorization: Bearer <token>` when set. */
  token?: string;
  /** Extra headers on every request. */
  headers?: Record<string, string>;
  /** A fetch implementation (default: the global one). */
  fetch?: typeof fetch;
}

/** A name as one path segment. */
export const seg = encodeURIComponent;

export class HttpClient {
  readonly url: string;
  private readonly headers: Record<string, string>;
  private readonly fetch: typeof fetch;

  constructor(options: ClientOptions | string) {
    const opts = typeof options === 'string' ? { url: options } : options;
    this.url = opts.url.replace(/\/+$/, '');
    this.headers = { ...opts.headers };
    if (opts.token) this.headers.authorization = `Bearer ${opts.token}`;
    this.fetch = opts.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /** One request; a non-2xx answer throws `CommitfeedError` with the server's code. */
  async request<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
    let res: Response;
    try {
      res = await this.fetch(this.url + path, {
        method,
        headers: body === undefined ? this.headers : { ...this.headers, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal,
      });
    } catch (err) {
      throw networkError(err);
    }
    if (!res.ok) throw await errorFrom(res);
    if (res.status === 204) return undefined as T;
    return (await res.json()) as T;
  }

  /** @internal the SSE request of a `Subscription`. */
  openStream(
    streams: readonly string[],
    position: { lastId?: string; from?: string },
    signal: AbortSignal,
  ): Promise<Response> {
    const q = new URLSearchParams();
    // A resumed connection sends Last-Event-ID (what the server expects from EventSource too).
    if (position.lastId === undefined && position.from) q.set('from', position.from);
    // Several streams share one connection (browsers allow 6 per origin over HTTP/1.1).
    if (streams.length > 1) for (const s of streams) q.append('stream', s);
    const path = streams.length === 1 ? `/v1/streams/${seg(streams[0])}/events` : '/v1/events';
    const query = q.toString();
    const headers: Record<string, string> = { ...this.headers, accept: 'text/event-stream' };
    if (position.lastId !== undefined) headers['last-event-id'] = position.lastId;
    return this.fetch(`${this.url}${path}${query ? `?${query}` : ''}`, { headers, signal });
  }
}
