// Tables (terminal and Markdown) and the SVG plot of scenario 1.

export interface Table {
  title: string;
  columns: string[];
  rows: string[][];
  notes: string[];
}

export function fmtNum(n: number, digits = 0): string {
  if (!Number.isFinite(n)) return '–';
  return n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/** Milliseconds with precision that suits the size. */
export function fmtMs(n: number): string {
  if (!Number.isFinite(n)) return '–';
  if (n < 10) return n.toFixed(2);
  if (n < 100) return n.toFixed(1);
  return n.toFixed(0);
}

export function textTable(t: Table): string {
  const widths = t.columns.map((c, i) => Math.max(c.length, ...t.rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  const out = [`== ${t.title}`, line(t.columns), widths.map((w) => '-'.repeat(w)).join('  ')];
  for (const r of t.rows) out.push(line(r));
  for (const n of t.notes) out.push(`   ${n}`);
  return out.join('\n');
}

export function markdownTable(t: Table): string {
  const esc = (s: string) => s.replace(/\|/g, '\\|');
  const out = [`### ${t.title}`, '', `| ${t.columns.map(esc).join(' | ')} |`];
  out.push(`| ${t.columns.map((_, i) => (i === 0 ? '---' : '---:')).join(' | ')} |`);
  for (const r of t.rows) out.push(`| ${r.map(esc).join(' | ')} |`);
  if (t.notes.length > 0) out.push('', ...t.notes.map((n) => `- ${n}`));
  return out.join('\n');
}

export interface Series {
  name: string;
  /** [concurrency, value] */
  throughput: [number, number][];
  p99: [number, number][];
}

const COLORS = ['#d62728', '#1f77b4', '#ff7f0e', '#2ca02c', '#9467bd', '#8c564b', '#e377c2'];

/** Two panels side by side: events/s and p99 latency (log scale) against connections (log scale). */
export function plotSvg(title: string, series: Series[], conns: number[]): string {
  const W = 960;
  const H = 400;
  const panelW = 400;
  const panelH = 270;
  const top = 60;
  const lefts = [70, 70 + panelW + 90];
  const xs = [...new Set(conns)].sort((a, b) => a - b);
  const lx = (c: number) => Math.log2(c);
  const [xmin, xmax] = [lx(xs[0]), lx(xs[xs.length - 1])];
  const xAt = (left: number, c: number) => left + 20 + ((lx(c) - xmin) / (xmax - xmin || 1)) * (panelW - 40);
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<title>${escXml(title)}: throughput and p99 latency against concurrency</title>`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${W / 2}" y="24" text-anchor="middle" font-size="16" font-weight="bold">${escXml(title)}</text>`,
  );
  const panel = (left: number, label: string, pick: (s: Series) => [number, number][], log: boolean) => {
    const values = series
      .flatMap((s) => pick(s).map(([, v]) => v))
      .filter((v) => Number.isFinite(v) && v > 0);
    let ymin = 0;
    let ymax = Math.max(1, ...values) * 1.1;
    let ticks: number[];
    if (log) {
      ymin = 10 ** Math.floor(Math.log10(Math.max(0.01, Math.min(...values, ymax))));
      ymax = 10 ** Math.ceil(Math.log10(ymax));
      ticks = [];
      for (let v = ymin; v <= ymax * 1.0001; v *= 10) ticks.push(v);
    } else {
      const step = niceStep(ymax / 5);
      ymax = Math.ceil(ymax / step) * step;
      ticks = [];
      for (let v = 0; v <= ymax + step / 2; v += step) ticks.push(v);
    }
    const yAt = (v: number) =>
      log
        ? top + panelH - ((Math.log10(v) - Math.log10(ymin)) / (Math.log10(ymax) - Math.log10(ymin))) * panelH
        : top + panelH - (v / ymax) * panelH;
    out.push(
      `<rect x="${left}" y="${top}" width="${panelW}" height="${panelH}" fill="none" stroke="#888"/>`,
      `<text x="${left + panelW / 2}" y="${top - 10}" text-anchor="middle" font-weight="bold">${escXml(label)}</text>`,
    );
    for (const t of ticks) {
      const y = yAt(t);
      out.push(
        `<line x1="${left}" x2="${left + panelW}" y1="${y}" y2="${y}" stroke="#eee"/>`,
        `<text x="${left - 6}" y="${y + 4}" text-anchor="end">${escXml(shortNum(t))}</text>`,
      );
    }
    for (const c of xs) {
      const x = xAt(left, c);
      out.push(
        `<line x1="${x}" x2="${x}" y1="${top}" y2="${top + panelH}" stroke="#eee"/>`,
        `<text x="${x}" y="${top + panelH + 16}" text-anchor="middle">${c}</text>`,
      );
    }
    out.push(
      `<text x="${left + panelW / 2}" y="${top + panelH + 34}" text-anchor="middle">concurrent connections / in-flight publishes</text>`,
    );
    series.forEach((s, i) => {
      const pts = pick(s).filter(([, v]) => Number.isFinite(v) && v > 0);
      if (pts.length === 0) return;
      const color = COLORS[i % COLORS.length];
      const d = pts.map(
        ([c, v], j) => `${j === 0 ? 'M' : 'L'}${xAt(left, c).toFixed(1)},${yAt(v).toFixed(1)}`,
      );
      out.push(`<path d="${d.join(' ')}" fill="none" stroke="${color}" stroke-width="2"/>`);
      for (const [c, v] of pts)
        out.push(
          `<circle cx="${xAt(left, c).toFixed(1)}" cy="${yAt(v).toFixed(1)}" r="3.5" fill="${color}"/>`,
        );
    });
  };
  panel(lefts[0], 'throughput (events/s, log scale)', (s) => s.throughput, true);
  panel(lefts[1], 'p99 publish latency (ms, log scale)', (s) => s.p99, true);
  series.forEach((s, i) => {
    const x = 70 + i * 175;
    const y = H - 14;
    out.push(
      `<rect x="${x}" y="${y - 10}" width="14" height="4" fill="${COLORS[i % COLORS.length]}"/>`,
      `<text x="${x + 20}" y="${y - 4}">${escXml(s.name)}</text>`,
    );
  });
  out.push('</svg>');
  return out.join('\n') + '\n';
}

function niceStep(raw: number): number {
  const p = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

function shortNum(v: number): string {
  if (v >= 1000) return `${+(v / 1000).toFixed(1)}K`;
  if (v < 1) return String(+v.toFixed(2));
  return String(+v.toFixed(1));
}

function escXml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}
