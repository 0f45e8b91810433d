/**
 * The module hook that lets tap's test processes import TypeScript (registered by test/ts-loader.mjs,
 * package.json's tap `node-arg`): a `.ts` file is compiled by esbuild — types stripped, nothing else
 * — and kept in node_modules/.cache/commitfeed-ts/ by a hash of its path and text, so a file is
 * compiled once per checkout and edit, not once per test process. Everything else goes to Node's own
 * loader untouched, but for 'kysely', which resolves to its CommonJS build (below).
 *
 * Why not tsx, which the service's own processes use: its hooks see every module, the ~1000 of
 * node_modules too, and that costs each test process about 0.3 s of CPU (of ~1.5 s to start), times
 * every file of every CI run. Imports name their `.ts` files (tsconfig's allowImportingTsExtensions),
 * so Node's resolution finds them as they are.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { transform } from 'esbuild';

const CACHE = fileURLToPath(new URL('../node_modules/.cache/commitfeed-ts/', import.meta.url));
mkdirSync(CACHE, { recursive: true });

// Kysely's CommonJS build (its package's `require` export) instead of its ES modules: ~280 files
// that would each pass through these hooks (a round trip to the hooks' thread per import and per
// load; CommonJS requires inside it do not), ~0.3 s of CPU per test and service process. Every
// import of 'kysely' in a process gets the same build, so there is one copy of its classes.
const require = createRequire(import.meta.url);
const AS_CJS = new Map(['kysely'].map((name) => [name, pathToFileURL(require.resolve(name)).href]));

export async function resolve(specifier, context, next) {
  const url = AS_CJS.get(specifier);
  if (url) return { url, format: 'commonjs', shortCircuit: true };
  return next(specifier, context);
}

export async function load(url, context, next) {
  if (!url.startsWith('file:') || !url.endsWith('.ts')) return next(url, context);
  const file = fileURLToPath(url);
  const text = readFileSync(file, 'utf8');
  const cached = `${CACHE}${createHash('sha1').update(`${file}\0${text}`).digest('hex')}.js`;
  let source;
  try {
    source = readFileSync(cached, 'utf8');
  } catch {
    ({ code: source } = await transform(text, {
      loader: 'ts',
      format: 'esm',
      target: 'node20',
      sourcemap: 'inline',
      sourcefile: file,
    }));
    // Written whole, then renamed: test processes of parallel runs may compile the same file at once.
    const part = `${cached}.${process.pid}`;
    writeFileSync(part, source);
    renameSync(part, cached);
  }
  return { format: 'module', source, shortCircuit: true };
}
