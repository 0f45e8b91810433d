/**
 * The module hook that lets tap's test processes import TypeScript (registered by test/ts-loader.mjs,
 * package.json's tap `node-arg`): a `.ts` file is compiled by esbuild — types stripped, nothing else
 * — and kept in node_modules/.cache/commitfeed-ts/ by a hash of its path and text, so a file is
 * compiled once per checkout and edit, not once per test process. Everything else goes to Node's own
 * loader untouched, but for 'kysely', which resolves to its CommonJS build (below).
 *
 * Why not tsx, which the service's own processes use: any registered hook sees every module, the
 * ~1000 of node_modules too (on Node 20 each import and load is a round trip to the hooks' thread),
 * and tsx's do more work for each than these, which pass everything but `.ts` on untouched: ~0.3-0.5 s
 * more CPU per process, times every file of every CI run. Imports name their `.ts` files (tsconfig's
 * allowImportingTsExtensions), so Node's resolution finds them as they are.
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
const KYSELY_CJS = pathToFileURL(createRequire(import.meta.url).resolve('kysely')).href;

export async function resolve(specifier, context, next) {
  if (specifier === 'kysely') return { url: KYSELY_CJS, format: 'commonjs', shortCircuit: true };
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
