// Reads a V8 .cpuprofile (node --cpu-prof) and says where the time went: self time by area
// (project code, each npm package, node internals, GC, idle) and the hottest functions.
import { readFileSync } from 'node:fs';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

function area(url: string, fn: string): string {
  if (!url) return fn.startsWith('(') ? fn : '(native / V8 builtins)';
  if (url.startsWith('node:')) return 'node internals';
  const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (m) return m[1];
  const p = /\/(src|bench|migrations)\//.exec(url);
  if (p) return `project ${p[1]}/`;
  return url;
}

export function summarizeProfile(file: string, top = 25): string {
  const prof = JSON.parse(readFileSync(file, 'utf8')) as Profile;
  const byId = new Map(prof.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  let total = 0;
  prof.samples.forEach((id, i) => {
    const dt = prof.timeDeltas[i] ?? 0;
    self.set(id, (self.get(id) ?? 0) + dt);
    total += dt;
  });
  const areas = new Map<string, number>();
  const fns = new Map<string, number>();
  for (const [id, us] of self) {
    const n = byId.get(id)!;
    const { functionName, url, lineNumber } = n.callFrame;
    const a = area(url, functionName);
    areas.set(a, (areas.get(a) ?? 0) + us);
    const short = url.replace(/^file:\/\/.*?\/(node_modules|src|bench)\//, '$1/');
    const key = `${functionName || '(anonymous)'}  ${short ? `${short}:${lineNumber + 1}` : ''}`;
    fns.set(key, (fns.get(key) ?? 0) + us);
  }
  const busy = total - (areas.get('(idle)') ?? 0);
  const pct = (us: number, of: number) => `${((us / of) * 100).toFixed(1).padStart(5)}%`;
  const lines = [
    `profile ${file.replace(/.*\/bench\//, 'bench/')}: ${(total / 1e6).toFixed(1)} s sampled, ${(busy / 1e6).toFixed(1)} s busy (not idle)`,
    '',
    'self time by area (% of busy time):',
  ];
  for (const [a, us] of [...areas]
    .filter(([a]) => a !== '(idle)')
    .sort((x, y) => y[1] - x[1])
    .slice(0, 15))
    lines.push(`  ${pct(us, busy)}  ${a}`);
  lines.push('', `hottest functions by self time (% of busy time), top ${top}:`);
  for (const [f, us] of [...fns]
    .filter(([f]) => !f.startsWith('(idle)'))
    .sort((x, y) => y[1] - x[1])
    .slice(0, top))
    lines.push(`  ${pct(us, busy)}  ${f}`);
  return lines.join('\n');
}
