// HTTP load process: autocannon against one URL, closed loop (each connection sends its next
// request when the previous answer arrives). Runs in its own process so the load generator never
// shares an event loop with the server it measures. Serves one run after another (serveJobs).
import autocannon from 'autocannon';
import { serveJobs } from '../lib/proc.ts';

export interface HttpLoadArgs {
  url: string;
  body: string;
  connections: number;
  durationSec: number;
  /** Request headers (default: a JSON content type); a Mercure publish sends a form and a token. */
  headers?: Record<string, string>;
}

export interface HttpLoadResult {
  ok: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  durationSec: number;
  rps: number;
  latency: { mean: number; p50: number; p90: number; p99: number; max: number };
  bytesRead: number;
}

serveJobs(async (args) => {
  const a = args as HttpLoadArgs;
  const r = await autocannon({
    url: a.url,
    method: 'POST',
    headers: a.headers ?? { 'content-type': 'application/json' },
    body: a.body,
    connections: a.connections,
    pipelining: 1,
    duration: a.durationSec,
    timeout: 10,
  });
  const ok = r['2xx'];
  const result: HttpLoadResult = {
    ok,
    non2xx: r.non2xx,
    errors: r.errors,
    timeouts: r.timeouts,
    durationSec: r.duration,
    rps: ok / r.duration,
    latency: {
      mean: r.latency.mean,
      p50: r.latency.p50,
      p90: r.latency.p90,
      p99: r.latency.p99,
      max: r.latency.max,
    },
    bytesRead: r.throughput.total,
  };
  return result;
});
