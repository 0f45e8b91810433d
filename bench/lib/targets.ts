// Where the bench sends events, and how each system names a stream.
import http from 'node:http';

export type Kind = 'http' | 'nats' | 'redis';

export interface Target {
  kind: Kind;
  /** http: the server's port. */
  port?: number;
  /** http: query string appended to the publish path, e.g. `?notify=0`. */
  query?: string;
}

export const NATS_URL = '127.0.0.1:4222';
export const REDIS_PORT = 6379;

export const natsSubject = (stream: string) => `bench.${stream}`;
export const redisKey = (stream: string) => `bench:${stream}`;
export const httpPath = (stream: string) => `/v1/streams/${encodeURIComponent(stream)}/events`;

/** A keep-alive JSON POST; resolves with the status code and body text. */
export function postJson(
  agent: http.Agent,
  port: number,
  path: string,
  body: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        path,
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => {
          text += c;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
        res.on('error', reject);
      },
    );
    req.setTimeout(10_000, () => req.destroy(new Error('request timed out after 10 s')));
    req.on('error', reject);
    req.end(body);
  });
}
