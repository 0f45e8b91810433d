/**
 * One delivery attempt: a POST with node:http(s), bounded by a timeout covering connect, send and
 * the whole response. Redirects are not followed (a 3xx is a failed attempt); the connection goes
 * only to addresses the AddressGuard allows, checked as it is made. Only the first KiB of the
 * response is kept (the delivery log's), the rest is read and dropped so the connection can be reused.
 */
import http from 'node:http';
import https from 'node:https';
import { isIP } from 'node:net';
import type { AddressGuard } from './address-guard.ts';

export interface PostResult {
  /** 2xx */
  ok: boolean;
  status: number | null;
  latencyMs: number;
  /** The first KiB of the response body. */
  response: string | null;
  /** Why no answer came (connection refused, timeout, refused address), or null. */
  error: string | null;
}

const KEEP = 1024;

/** One connection pool per scheme, keeping connections alive between deliveries. */
const agents = {
  'http:': new http.Agent({ keepAlive: true, maxSockets: 256 }),
  'https:': new https.Agent({ keepAlive: true, maxSockets: 256 }),
};

export function post(
  url: URL,
  headers: Record<string, string>,
  body: string,
  timeoutMs: number,
  guard: AddressGuard,
): Promise<PostResult> {
  const started = performance.now();
  const done = (r: Omit<PostResult, 'latencyMs'>): PostResult => ({
    ...r,
    latencyMs: performance.now() - started,
  });
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  if (isIP(host) !== 0) {
    const refused = guard.refusal(host);
    if (refused)
      return Promise.resolve(
        done({ ok: false, status: null, response: null, error: `refused to connect to ${refused}` }),
      );
  }
  return new Promise((resolve) => {
    let settled = false;
    const finish = (r: Omit<PostResult, 'latencyMs'>) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(done(r));
    };
    const scheme = url.protocol === 'https:' ? https : http;
    const req = scheme.request(url, {
      method: 'POST',
      agent: agents[url.protocol as 'http:' | 'https:'],
      lookup: guard.lookup,
      headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
    });
    const timer = setTimeout(() => {
      req.destroy();
      finish({ ok: false, status: null, response: null, error: `timed out after ${timeoutMs} ms` });
    }, timeoutMs);
    req.on('error', (err) => finish({ ok: false, status: null, response: null, error: err.message }));
    req.on('response', (res) => {
      const status = res.statusCode ?? 0;
      const chunks: Buffer[] = [];
      let kept = 0;
      res.on('data', (chunk: Buffer) => {
        if (kept < KEEP) {
          chunks.push(chunk.subarray(0, KEEP - kept));
          kept += Math.min(chunk.length, KEEP - kept);
        }
      });
      res.on('error', (err) => finish({ ok: false, status, response: null, error: err.message }));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        finish({ ok: status >= 200 && status < 300, status, response: text, error: null });
      });
    });
    req.end(body);
  });
}
