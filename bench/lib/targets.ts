// Where the bench sends events, and how each system names a stream.
import http from 'node:http';

export type Kind = 'http' | 'mercure' | 'nats' | 'redis';

export interface Target {
  kind: Kind;
  /** http, mercure: the server's port. */
  port?: number;
  /** http: query string appended to the publish path, e.g. `?notify=0`. */
  query?: string;
  /** mercure: the bearer token (with a publish grant) for the hub. */
  token?: string;
}

export const NATS_URL = '127.0.0.1:4222';
export const REDIS_PORT = 6379;

export const natsSubject = (stream: string) => `bench.${stream}`;
export const redisKey = (stream: string) => `bench:${stream}`;
export const httpPath = (stream: string) => `/v1/streams/${encodeURIComponent(stream)}/events`;

/** The Mercure hub's path; a bench stream is the Mercure topic mercureTopic(stream). */
export const MERCURE_PATH = '/.well-known/mercure';
export const mercureTopic = (stream: string) => `https://bench.example/${stream}`;
/** The form body of a Mercure publish of `data` to the stream's topic. */
export const mercureForm = (stream: string, data: string) =>
  new URLSearchParams({ topic: mercureTopic(stream), data }).toString();
/** The hub's subscribe path for one exact topic. */
export const mercureSubscribePath = (stream: string) =>
  `${MERCURE_PATH}?${new URLSearchParams({ match: mercureTopic(stream) })}`;

/** A keep-alive JSON POST; resolves with the status code and body text. */
export function postJson(
  agent: http.Agent,
  port: number,
  path: string,
  body: string,
  headers: Record<string, string> = { 'content-type': 'application/json' },
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        path,
        method: 'POST',
        agent,
        headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
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
