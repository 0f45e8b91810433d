/** Debian's Chromium driven through playwright-core, for the browser tests; closed at teardown. */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type BrowserContext, chromium } from 'playwright-core';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
/** Where tests leave their screenshots (gitignored). */
export const ARTIFACTS = path.resolve('test-artifacts');
const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** A fresh headless Chromium profile; fails (never skips) when Chromium is missing. */
export async function launchChromium(
  t: { teardown(fn: () => unknown): void },
  viewport = { width: 1280, height: 900 },
): Promise<BrowserContext> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `Chromium not found at ${CHROMIUM}: install it (apt-get install -y chromium; .ci/run does) or set CHROMIUM_PATH`,
    );
  }
  const userDataDir = mkdtempSync(path.join(os.tmpdir(), 'commitfeed-chromium-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: FLAGS,
    viewport,
  });
  t.teardown(async () => {
    await context.close().catch(() => {});
    rmSync(userDataDir, { recursive: true, force: true });
  });
  return context;
}
