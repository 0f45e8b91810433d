// Plumbing for the queue tests: HTTP calls for each endpoint, table reads, timing helpers.
import { sql } from 'kysely';
import type { sqlClient } from './helpers.ts';

export { until } from './helpers.ts';

export interface Claimed {
  id: string;
  payload: unknown;
  attempt: number;
  maxAttempts: number;
  lease: string;
  leaseExpiresAt: string;
}

// biome-ignore lint/suspicious/noExplicitAny: response bodies are checked field by field
export type Body = any;

export async function api(base: string, method: string, path: string, body?: unknown) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: (text === '' ? undefined : JSON.parse(text)) as Body };
}

export const enqueue = (base: string, queue: string, body: unknown) =>
  api(base, 'POST', `/v1/queues/${queue}/jobs`, body);
export const claim = async (base: string, queue: string, body: object = {}) => {
  const res = await api(base, 'POST', `/v1/queues/${queue}/claim`, body);
  if (res.status !== 200) throw new Error(`claim: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.jobs as Claimed[];
};
export const ack = (base: string, queue: string, id: string, lease: string) =>
  api(base, 'POST', `/v1/queues/${queue}/jobs/${id}/ack`, { lease });
export const nack = (base: string, queue: string, id: string, body: object) =>
  api(base, 'POST', `/v1/queues/${queue}/jobs/${id}/nack`, body);
export const stats = async (base: string, queue: string) =>
  (await api(base, 'GET', `/v1/queues/${queue}`)).body;

export async function jobRows(db: ReturnType<typeof sqlClient>) {
  const { rows } = await sql<{ id: string; state: string; attempt: number }>`
    select id::text as id, state, attempt from commitfeed.jobs order by id`.execute(db);
  return rows;
}

/** Resolves with the promise's value and when it settled, so a test can say "not before X". */
export function timed<T>(p: Promise<T>): Promise<{ value: T; at: number }> & { settled: () => boolean } {
  let done = false;
  const q = p.then((value) => {
    done = true;
    return { value, at: Date.now() };
  }) as Promise<{ value: T; at: number }> & { settled: () => boolean };
  q.settled = () => done;
  return q;
}
