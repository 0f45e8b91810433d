/**
 * Typed configuration from the environment, defined once: `SETTINGS` names every variable, its
 * default, how it is parsed and what it means (the area files beside this one hold its parts, in the
 * order they are documented), and loadConfig reads exactly that table; the Config type is derived
 * from it. `.env.example` and `docs/configuration.md` list the same variables with the same defaults
 * (test/config.test.ts compares them with this table; `npx tsx src/cli/config-docs.ts` prints both).
 *
 * A `.env` file in the working directory is read first if present (real environment variables win
 * over it). A bad value stops start-up with an error naming the variable and what it accepts.
 * Durations are written with a unit (`250ms`, `5s`, `30m`, `12h`, `7d`); the field names of Config
 * keep the `Ms` suffix because the code works in milliseconds.
 */
import { existsSync } from 'node:fs';
import { ACCESS_SETTINGS } from './access.ts';
import { DELIVERY_SETTINGS } from './delivery.ts';
import { MERCURE_SETTINGS } from './mercure.ts';
import { RETENTION_SETTINGS } from './retention.ts';
import { SERVER_SETTINGS } from './server.ts';
import { WEBHOOK_SETTINGS } from './webhooks.ts';
import { type Env, type Setting, formatMs } from './settings.ts';

export type { MercureIssuerConfig } from './mercure.ts';

/** Every variable loadConfig reads, keyed by the Config field it fills, in the order they are documented. */
export const SETTINGS = {
  ...SERVER_SETTINGS,
  ...DELIVERY_SETTINGS,
  ...ACCESS_SETTINGS,
  ...RETENTION_SETTINGS,
  ...MERCURE_SETTINGS,
  ...WEBHOOK_SETTINGS,
};

/** The service's settings, one field per entry of SETTINGS, typed by what its parse returns. */
export type Config = { [K in keyof typeof SETTINGS]: ReturnType<(typeof SETTINGS)[K]['parse']> };

/** Variables read by a setting besides its own name (documented beside it). */
export const COMPANIONS: Record<string, { name: string; doc: string }> = {
  JWT_PUBLIC_KEY: {
    name: 'JWT_PUBLIC_KEY_FILE',
    doc: 'A file holding the PEM public key, when JWT_PUBLIC_KEY is unset.',
  },
};

/**
 * Names used before durations took units. Nothing was released with them, so they are refused with
 * the new name rather than silently ignored (a setting that quietly stops working is worse).
 */
export const RENAMED: Record<string, string> = {
  POLL_INTERVAL_MS: 'POLL_INTERVAL',
  HEARTBEAT_MS: 'HEARTBEAT_INTERVAL',
  SSE_RETRY_MS: 'SSE_RETRY',
  STATEMENT_TIMEOUT_MS: 'STATEMENT_TIMEOUT',
  SLOW_SUBSCRIBER_MAX_MS: 'SLOW_SUBSCRIBER_TIMEOUT',
  JANITOR_LOCK_TIMEOUT_MS: 'JANITOR_LOCK_TIMEOUT',
};

/** Every documented variable, in table order: what `.env.example` and docs/configuration.md list. */
export function documentedVariables(): {
  name: string;
  default: string | undefined;
  doc: string;
  section?: string;
}[] {
  const out: { name: string; default: string | undefined; doc: string; section?: string }[] = [];
  for (const s of Object.values(SETTINGS) as Setting<unknown>[]) {
    out.push({ name: s.name, default: s.default, doc: s.doc, section: s.section });
    const companion = COMPANIONS[s.name];
    if (companion) out.push({ name: companion.name, default: undefined, doc: companion.doc });
  }
  return out;
}

export function loadConfig(env: Env = process.env): Config {
  for (const [old, now] of Object.entries(RENAMED)) {
    if (env[old] !== undefined && env[old] !== '') {
      const suggestion = /^\d+$/.test(env[old]) ? `${now}=${formatMs(Number(env[old]))}` : now;
      throw new Error(
        `${old} is no longer read: set ${suggestion} instead (durations take a unit: 250ms, 5s, 7d)`,
      );
    }
  }
  const config: Record<string, unknown> = {};
  for (const [field, s] of Object.entries(SETTINGS) as [string, Setting<unknown>][]) {
    const given = env[s.name];
    config[field] = s.parse(given === undefined || given === '' ? s.default : given, env);
  }
  return config as unknown as Config;
}

/** Reads `.env` into process.env (without overriding variables already set). */
export function loadDotEnv(file = '.env'): void {
  if (existsSync(file)) process.loadEnvFile(file);
}
