// The webhook bench's receiver (bench/experiments/webhooks.ts): answers 204 to every POST /r/<run>,
// and keeps per run the distinct webhook-ids (or body ids) seen and each first delivery's latency:
// its arrival time minus `t`, the sender's epoch milliseconds in the event data
// (performance.timeOrigin + performance.now(), one clock for every process of the machine).
// GET /stats/<run> answers {count, distinct, p50, p99, first, last}.
import http from 'node:http';

interface Run {
  count: number;
  ids: Set<string>;
  latencies: number[];
  first: number;
  last: number;
}
const runs = new Map<string, Run>();
const now = () => performance.timeOrigin + performance.now();

function pct(sorted: number[], p: number): number {
  return sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

http
  .createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const at = now();
      const [, kind, name] = (req.url ?? '').split('/');
      if (kind === 'stats') {
        const r = runs.get(name);
        const sorted = [...(r?.latencies ?? [])].sort((a, b) => a - b);
        res.end(
          JSON.stringify({
            count: r?.count ?? 0,
            distinct: r?.ids.size ?? 0,
            p50: pct(sorted, 50),
            p99: pct(sorted, 99),
            first: r?.first ?? 0,
            last: r?.last ?? 0,
          }),
        );
        return;
      }
      let r = runs.get(name);
      if (!r) {
        r = { count: 0, ids: new Set(), latencies: [], first: at, last: at };
        runs.set(name, r);
      }
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { id: string; data: { t?: number } };
      const id = String(req.headers['webhook-id'] ?? body.id);
      r.count++;
      r.last = at;
      if (!r.ids.has(id)) {
        r.ids.add(id);
        if (typeof body.data?.t === 'number') r.latencies.push(at - body.data.t);
      }
      res.writeHead(204).end();
    });
  })
  .listen(Number(process.env.PORT), '127.0.0.1', () => process.stdout.write('up\n'));
