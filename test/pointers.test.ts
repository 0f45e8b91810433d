// Pointers that cannot go stale: every path the project's files cite resolves to a file or folder of
// the project, and every cited anchor to a heading. Read are src/ (code and SQL), migrations/, test/,
// .ci/, public/index.html, the docs, README.md and .env.example. Recognised are paths from the root
// (`src/feed/feed.ts`, `docs/operations.md#metrics`, `.ci/run`, globs like `src/sql/append-*.sql`,
// which must match a file), paths with a folder and an extension (`feed/queries/read-tail.ts`:
// resolved against the citing file's folder, the folders above it and src/), file names
// (`read-tail.ts`: those folders first, then any file of that name) and Markdown links (relative to
// the page). Also: docs/architecture.md names every folder of the project.
// bench/ is not read (its scripts are being regrouped); pointers into bench/ from the files above are
// checked like any other.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';

const ROOT = fileURLToPath(new URL('../', import.meta.url));

/** The project's files: tracked by git, or new and not ignored by .gitignore. */
const FILES = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard'], {
  cwd: ROOT,
  encoding: 'utf8',
})
  .split('\n')
  .filter((f) => f !== '' && existsSync(join(ROOT, f)));
/** Their folders, each ending with `/`. */
const FOLDERS = [
  ...new Set(
    FILES.flatMap((f) =>
      f
        .split('/')
        .slice(0, -1)
        .map((_, i, parts) => `${parts.slice(0, i + 1).join('/')}/`),
    ),
  ),
];
/** The files whose pointers are checked (not this one: its path-like strings are examples and data). */
const SOURCES = FILES.filter((p) => p !== 'test/pointers.test.ts').filter(
  (p) =>
    /^src\/.*\.(ts|sql)$/.test(p) ||
    /^migrations\/[^/]+\.ts$/.test(p) ||
    /^test\/.*\.(ts|mjs)$/.test(p) ||
    p === 'public/index.html' ||
    /^\.ci\/[^/]+$/.test(p) ||
    /^docs\/.*\.md$/.test(p) ||
    p === 'README.md' ||
    p === '.env.example',
);

/** Path-like text that is never a pointer into the project: a match starting with one of these is skipped. */
const NOT_POINTERS: [string, string][] = [
  ['dist/', 'the build output (package.json main/exports), not in the repository'],
  ['node_modules/', 'installed packages'],
];
/** Single pointers that name a file outside the project on purpose, each with its reason. */
const ALLOWED: { file: string; target: string; why: string }[] = [
  { file: 'docs/client.md', target: 'tour.ts', why: "the reader's own file, which the recipe saves" },
  {
    file: 'test/mercure-compat-browser.test.ts',
    target: 'conformance-tests/mercure.spec.ts',
    why: "a file of the Mercure project's repository (dunglas/mercure)",
  },
];

const ROOTS = /^(?:src|test|docs|bench|migrations|public|\.ci)\//;
/** `src/feed/feed.ts`, `docs/operations.md#metrics`, `.ci/run`, `src/sql/append-*.sql`: from the root. */
const FROM_ROOT = /(?<![\w./@-])((?:src|test|docs|bench|migrations|public|\.ci)\/[\w./*{},-]*(?:#[\w-]+)?)/g;
/** `feed/queries/read-tail.ts`: a folder and a file. */
const SHORT = /(?<![\w./@#$-])((?:[\w-]+\/)+[\w.-]+\.(?:ts|sql|md|mjs)(?:#[\w-]+)?)(?![\w/])/g;
/** `read-tail.ts`, `streams.md#cursor-format`: a file's name (one-letter names are SQL or JS aliases: `s.ts`). */
const NAME = /(?<![\w./@#$-])([\w-]{2,}[\w.-]*\.(?:ts|sql|md|mjs)(?:#[\w-]+)?)(?![\w/])/g;
/** A Markdown link: `[text](target)`, relative to the page. */
const LINK = /\]\(([^)\s]+)\)/g;

interface Pointer {
  file: string;
  line: number;
  target: string;
  /** Folders a relative path is resolved from, first match wins; `anywhere`: any file of that name. */
  bases: string[];
  anywhere?: boolean;
  link?: boolean;
}

const lineOf = (text: string, index: number) => text.slice(0, index).split('\n').length;
/** Markdown without its fenced code blocks (blanked, so positions and line numbers stay). */
const withoutFences = (text: string) =>
  text.replace(/^```[\s\S]*?^```/gm, (block) => block.replace(/[^\n]/g, ' '));
/** A folder and each folder above it, up to the root (''). */
const upFrom = (dir: string): string[] => (dir === '.' || dir === '' ? [''] : [dir, ...upFrom(dirname(dir))]);

function pointersOf(file: string): Pointer[] {
  const text = readFileSync(join(ROOT, file), 'utf8');
  const near = [...upFrom(dirname(file)), 'src'];
  const out: Pointer[] = [];
  /** Where the Markdown links' targets start: a path there is read once, as the link. */
  const linked = new Set<number>();
  const add = (index: number, raw: string, p: Omit<Pointer, 'file' | 'line' | 'target'>) => {
    const target = raw.replace(/[.,:;]+$/, '');
    if (linked.has(index) || NOT_POINTERS.some(([prefix]) => target.startsWith(prefix))) return;
    out.push({ file, line: lineOf(text, index), target, ...p });
  };
  if (file.endsWith('.md')) {
    for (const m of withoutFences(text).matchAll(LINK)) {
      if (!/^[a-z]+:/i.test(m[1])) add(m.index + 2, m[1], { bases: [dirname(file)], link: true });
      linked.add(m.index + 2);
    }
  }
  for (const m of text.matchAll(FROM_ROOT)) add(m.index, m[1], { bases: [''] });
  for (const m of text.matchAll(SHORT)) if (!ROOTS.test(m[1])) add(m.index, m[1], { bases: near });
  for (const m of text.matchAll(NAME)) add(m.index, m[1], { bases: near, anywhere: true });
  return out;
}

/** GitHub's anchor for a heading. */
const slug = (heading: string) =>
  heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');

const anchorsOf = (file: string) =>
  withoutFences(readFileSync(join(ROOT, file), 'utf8'))
    .split('\n')
    .filter((l) => /^#{1,6} /.test(l))
    .map((l) => slug(l.replace(/^#+ /, '')));

/** A glob (`*`, `**`, `{a,b}`) as a regular expression over paths from the root. */
function globRegExp(glob: string): RegExp {
  const body = glob.replace(/\*\*\/|\*|\{([^}]*)\}|[.+^$()|[\]\\]/g, (m, alts?: string) => {
    if (m === '**/') return '(?:.*/)?';
    if (m === '*') return '[^/]*';
    if (alts !== undefined) return `(?:${alts.split(',').join('|')})`;
    return `\\${m}`;
  });
  return new RegExp(`^${body}$`);
}

const exists = (path: string) => FILES.includes(path) || FOLDERS.includes(`${path.replace(/\/$/, '')}/`);

/** Why a pointer does not resolve, or undefined when it does. */
function problem(p: Pointer): string | undefined {
  const [path, anchor] = p.target.split('#');
  const candidates = path === '' ? [p.file] : p.bases.map((base) => join(base, path).replace(/\/$/, ''));
  if (/[*{]/.test(path)) {
    return candidates.some((c) => FILES.some((f) => globRegExp(c).test(f)))
      ? undefined
      : 'the pattern matches nothing';
  }
  let found = candidates.find(exists);
  if (found === undefined && p.anywhere) found = FILES.find((f) => f.endsWith(`/${path}`));
  if (found === undefined) return p.anywhere ? 'no file of that name' : 'no such file or folder';
  if (anchor !== undefined && !anchorsOf(found).includes(anchor)) return `${found} has no heading #${anchor}`;
  return undefined;
}

t.test('every path and link cited in code, SQL, comments and docs resolves', async (t) => {
  const pointers = SOURCES.flatMap(pointersOf);
  const links = pointers.filter((p) => p.link).length;
  t.ok(pointers.length >= 500, `pointers checked: ${pointers.length} in ${SOURCES.length} files`);
  t.ok(links >= 50, `of them Markdown links: ${links}`);
  const allowed = (p: Pointer) => ALLOWED.some((a) => a.file === p.file && a.target === p.target);
  const unresolved = pointers
    .filter((p) => problem(p) !== undefined)
    .sort((a, b) => a.file.localeCompare(b.file) || a.line - b.line);
  t.same(
    unresolved.filter((p) => !allowed(p)).map((p) => `${p.file}:${p.line}: ${p.target} (${problem(p)})`),
    [],
    'point to the file as it is now, or drop the pointer',
  );
  t.same(
    ALLOWED.filter((a) => !unresolved.some((p) => p.file === a.file && p.target === a.target)).map(
      (a) => a.target,
    ),
    [],
    'ALLOWED lists only pointers that are still there and still outside the project',
  );
});

t.test('docs/architecture.md names every folder of the project', async (t) => {
  const text = readFileSync(join(ROOT, 'docs/architecture.md'), 'utf8');
  const section = text.slice(
    text.indexOf('## Where things live'),
    text.indexOf('\n## ', text.indexOf('## Where things live') + 1),
  );
  // Each bullet opens with its folders in bold (**`queues/`**); a subfolder is named in its parent's bullet.
  const bullets = section.split(/\n- /).map((b) => ({
    heads: [...b.matchAll(/\*\*`([^`]+\/)`/g)].map((m) => m[1]),
    names: [...b.matchAll(/`([^`\s]+\/)`/g)].map((m) => m[1]),
  }));
  const folders = [
    ...FOLDERS.filter((p) => /^[^/]+\/$/.test(p)),
    ...FOLDERS.filter((p) => p.startsWith('src/') && p !== 'src/').map((p) => p.slice('src/'.length)),
  ];
  const named = (folder: string) => {
    if (bullets.some((b) => b.heads.includes(folder))) return true;
    const parent = folder.replace(/[^/]+\/$/, '');
    const own = folder.slice(parent.length);
    return bullets.some((b) => b.heads.includes(parent) && b.names.includes(own));
  };
  t.ok(folders.length >= 20, `folders: ${folders.join(' ')}`);
  t.same(
    folders.filter((f) => !named(f)),
    [],
    'each folder has its bullet under "Where things live" (a subfolder: named in its parent\'s)',
  );
});
