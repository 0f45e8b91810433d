// The layer rule of docs/architecture.md, checked on every import in src/ (type-only imports too:
// they are arrows a reader follows). A folder imports its own files and lower layers only; folders
// of one layer do not import each other. No import cycles anywhere, and file and function sizes
// stay within the house limits (350 lines a file, 80 a function).
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import ts from 'typescript';

const SRC = resolve(dirname(fileURLToPath(import.meta.url)), '../src');

/**
 * Layers, lowest first. A module is placed by its folder under src/ (or, at the top, its file name).
 * This table is the rule; docs/architecture.md explains it.
 */
const LAYERS: string[][] = [
  ['errors.ts', 'timers.ts', 'metrics.ts'],
  ['config'],
  ['db'],
  ['commit'],
  ['feed'],
  ['retention'],
  ['auth', 'cluster'],
  ['http'],
  ['streams', 'queues', 'mercure'],
  ['flows', 'tx'],
  ['webhooks'],
  ['ops'],
  ['app.ts'],
  ['server.ts'],
  ['main.ts', 'index.ts', 'cli'],
];
/** Folders that stand apart: they import nothing of the server, and nothing of the server imports them. */
const APART = ['client'];

/** Imports that break the rule today; the list only shrinks (the test fails on one that is gone). */
const KNOWN: string[] = [];

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    if (statSync(p).isDirectory()) return files(p);
    return /\.ts$/.test(f) && !f.endsWith('.d.ts') ? [p] : [];
  });
}

/** The module a file belongs to for the rule: its first folder under src/, or its name at the top. */
function unit(file: string): string {
  return relative(SRC, file).split('/')[0];
}

function rank(u: string): number {
  const i = LAYERS.findIndex((layer) => layer.includes(u));
  return i;
}

/** Relative imports and re-exports of a file, resolved to files. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const out: string[] = [];
  for (const m of text.matchAll(/(?:import|export)\s[^'";]*?from\s*['"](\.[^'"]+)['"]/g)) {
    out.push(resolve(dirname(file), m[1]));
  }
  for (const m of text.matchAll(/import\(\s*['"](\.[^'"]+)['"]\s*\)/g)) {
    out.push(resolve(dirname(file), m[1]));
  }
  return out;
}

const all = files(SRC);
const edges = new Map(all.map((f) => [f, importsOf(f).filter((target) => target.startsWith(SRC))]));

t.test('every module of src/ has a layer', async (t) => {
  const units = [...new Set(all.map(unit))].sort();
  const placed = new Set([...LAYERS.flat(), ...APART]);
  t.same(
    units.filter((u) => !placed.has(u)),
    [],
    'a new folder (or top-level file) of src/ needs its place in LAYERS here and in docs/architecture.md',
  );
});

t.test('imports run only downward', async (t) => {
  const wrong: string[] = [];
  for (const [file, targets] of edges) {
    const from = unit(file);
    for (const target of targets) {
      const to = unit(target);
      if (from === to) continue;
      const arrow = `${relative(SRC, file)} -> ${relative(SRC, target)}`;
      const apart = APART.includes(from) || APART.includes(to);
      if (apart || rank(to) >= rank(from)) wrong.push(arrow);
    }
  }
  t.same(
    wrong.filter((w) => !KNOWN.includes(w)),
    [],
    'a module imports only its own folder and lower layers (LAYERS above, docs/architecture.md)',
  );
  t.same(
    KNOWN.filter((k) => !wrong.includes(k)),
    [],
    'KNOWN lists only imports that still exist (remove the ones that are gone)',
  );
});

t.test('no import cycles', async (t) => {
  const cycles: string[] = [];
  const done = new Set<string>();
  const stack: string[] = [];
  const visit = (f: string) => {
    if (stack.includes(f)) {
      cycles.push([...stack.slice(stack.indexOf(f)), f].map((p) => relative(SRC, p)).join(' -> '));
      return;
    }
    if (done.has(f)) return;
    stack.push(f);
    for (const target of edges.get(f) ?? []) visit(target);
    stack.pop();
    done.add(f);
  };
  for (const f of all) visit(f);
  t.same(cycles, [], 'no file imports itself through others');
});

/** Files and functions past the house limits (a route plugin registers named handlers instead). */
const MAX_FILE_LINES = 350;
const MAX_FUNCTION_LINES = 80;
/** Files past a limit today; the list only shrinks. */
const OVERSIZE: string[] = [];

t.test(`no file in src/ over ${MAX_FILE_LINES} lines, no function over ${MAX_FUNCTION_LINES}`, async (t) => {
  const long: string[] = [];
  for (const f of all) {
    const text = readFileSync(f, 'utf8');
    const lines = text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
    if (lines > MAX_FILE_LINES) long.push(`${relative(SRC, f)}: ${lines} lines`);
    const source = ts.createSourceFile(f, text, ts.ScriptTarget.Latest, true);
    const visit = (n: ts.Node) => {
      if (ts.isFunctionLike(n) && 'body' in n && n.body) {
        const start = source.getLineAndCharacterOfPosition(n.getStart(source)).line;
        const end = source.getLineAndCharacterOfPosition(n.getEnd()).line;
        if (end - start + 1 > MAX_FUNCTION_LINES) {
          long.push(`${relative(SRC, f)}:${start + 1}: a function of ${end - start + 1} lines`);
        }
      }
      ts.forEachChild(n, visit);
    };
    visit(source);
  }
  const fileOf = (l: string) => l.split(':')[0];
  t.same(
    long.filter((l) => !OVERSIZE.includes(fileOf(l))),
    [],
    'split long files by job and long functions into named steps',
  );
  t.same(
    OVERSIZE.filter((f) => !long.some((l) => fileOf(l) === f)),
    [],
    'OVERSIZE lists only files still past a limit (remove the ones that are within them)',
  );
});
