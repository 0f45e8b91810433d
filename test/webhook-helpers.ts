// Plumbing for the webhook tests: a real receiver process (test/fixtures/webhook-receiver.mjs,
// verifying with the standardwebhooks library) on a fixed port so it comes back at the same URL
// after a stop, its delivery log, and the committed events an endpoint should receive.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Kysely, sql } from 'kysely';
import { type Config, loadConfig } from '../src/config/config.ts';
import type { Database } from '../src/db/database.ts';
import { feedTag, freePort, within } from './helpers.ts';

const RECEIVER = fileURLToPath(new URL('./fixtures/webhook-receiver.mjs', import.meta.url));

// biome-ignore lint/suspicious/noExplicitAny: tap's Test type is not needed in detail here
type T = { teardown(fn: () => unknown): void } & Record<string, any>;

/**
 * A receiver's port: TEST_PG_PORT + 50 + n when the run has its own embedded cluster (each such run
 * has its own TEST_PG_PORT); a free port otherwise (a run on DATABASE_URL, beside other runs).
 */
export async function receiverPort(n: number): Promise<number> {
  const base = process.env.TEST_PG_PORT;
  return base ? Number(base) + 50 + n : freePort();
}

/** Webhook settings for a test server: deliveries to 127.0.0.1 allowed, a short retry schedule. */
export function webhookConfig(env: Record<string, string> = {}): Partial<Config> {
  const c = loadConfig({
    WEBHOOK_ALLOW_ADDRESSES: '127.0.0.1',
    WEBHOOK_RETRY_SCHEDULE: '0,50ms,100ms,200ms,300ms,300ms,300ms,300ms,300ms,300ms,300ms,300ms,300ms,300ms',
    ...env,
  });
  return {
    webhookAllowAddresses: c.webhookAllowAddresses,
    webhookRetrySchedule: c.webhookRetrySchedule,
    webhookDisableAfterMs: c.webhookDisableAfterMs,
    webhookTimeoutMs: c.webhookTimeoutMs,
    pollIntervalMs: 100,
  };
}

export interface Delivery {
  id: string;
  ts: string;
  verified: number[];
  status: number;
  body: string;
  path: string;
  extra: string | null;
  at: number;
}

export class Receiver {
  proc: ChildProcess | undefined;
  readonly log: string;
  private readonly dir: string;

  constructor(
    t: T,
    readonly port: number,
    public secrets: string[] = [],
  ) {
    this.dir = mkdtempSync(path.join(os.tmpdir(), 'cf-webhook-'));
    this.log = path.join(this.dir, 'deliveries.jsonl');
    t.teardown(async () => {
      await this.stop();
      rmSync(this.dir, { recursive: true, force: true });
    });
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}/hook`;
  }

  async start(env: Record<string, string> = {}): Promise<void> {
    const proc = spawn(process.execPath, [RECEIVER], {
      env: {
        ...process.env,
        WH_PORT: String(this.port),
        WH_LOG: this.log,
        WH_SECRETS: JSON.stringify(this.secrets),
        ...env,
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    this.proc = proc;
    await within(
      new Promise<void>((resolve, reject) => {
        proc.stdout!.once('data', () => resolve());
        proc.once('exit', (code) => reject(new Error(`the receiver exited with ${code} as it started`)));
      }),
      10_000,
      'the receiver to listen',
    );
  }

  async stop(): Promise<void> {
    const p = this.proc;
    this.proc = undefined;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise<void>((r) => p.once('exit', () => r()));
    p.kill('SIGKILL');
    await within(exited, 10_000, 'the receiver to exit');
  }

  async control(c: {
    status?: number;
    delayMs?: number;
    secrets?: string[];
    statusSeq?: number[];
  }): Promise<void> {
    if (c.secrets) this.secrets = c.secrets;
    const res = await fetch(`http://127.0.0.1:${this.port}/_control`, {
      method: 'POST',
      body: JSON.stringify(c),
    });
    await res.arrayBuffer();
  }

  deliveries(): Delivery[] {
    if (!existsSync(this.log)) return [];
    // Only whole lines: the receiver may be half-way through appending one as this reads. Its line is
    // written before it answers, so every delivery it has answered is here.
    const lines = readFileSync(this.log, 'utf8').split('\n');
    lines.pop();
    return lines.filter((l) => l !== '').map((l) => JSON.parse(l) as Delivery);
  }

  /** Distinct webhook-ids answered 2xx, in the order first answered. */
  deliveredIds(): string[] {
    const seen = new Set<string>();
    for (const d of this.deliveries()) if (d.status < 300) seen.add(d.id);
    return [...seen];
  }
}

/** The cursors (tagged: the webhook-ids) of the committed events of streams matching `re` (a
 * PostgreSQL regexp) and, given, of type `type`, in feed order. */
export async function committed(db: Kysely<Database>, re: string, type?: string): Promise<string[]> {
  const tag = await feedTag(db);
  const { rows } = await sql<{ c: string }>`
    select txid::text || '-' || id::text as c from commitfeed.feed
    where stream ~ ${re} and (${type ?? null}::text is null or type = ${type ?? null})
    order by txid, id`.execute(db);
  return rows.map((r) => `${r.c}.${tag}`);
}
