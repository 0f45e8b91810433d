/**
 * The arguments for `node` that run one of the service's TypeScript entry points (src/main.ts,
 * src/cli/maint.ts) as a child process of a test: the tests' own loader (test/ts-hooks.mjs), whose
 * compiled files are cached on disk and whose hooks do less for each module than tsx's: ~0.5 s less
 * CPU per process, and the kill, chaos and worker tests start dozens of them.
 */
const LOADER = new URL('./ts-loader.mjs', import.meta.url).href;

export function nodeArgs(entry: string): string[] {
  return ['--import', LOADER, entry];
}
