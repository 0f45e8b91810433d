/**
 * The kit every setting is built from: a Setting names one environment variable, its default as it
 * would be written in `.env`, its documentation and how it is parsed. The area files (server.ts,
 * delivery.ts, access.ts, retention.ts, mercure.ts) build their settings with these; config.ts
 * assembles them into the one table loadConfig reads.
 */
import { MAX_TIMER_MS } from '../timers.ts';

export type Env = NodeJS.ProcessEnv;

/** One environment variable: the single place its name, default and meaning are written. */
export interface Setting<T> {
  name: string;
  /** The default as it would be written in `.env`; undefined: unset unless given. */
  default?: string;
  /** One or two sentences for `.env.example` and docs/configuration.md. */
  doc: string;
  /** A heading that starts a group of related variables (in `.env.example` and the docs). */
  section?: string;
  /** Reads the value (`raw` is the variable, or the default when it is unset or empty). */
  parse(raw: string | undefined, env: Env): T;
}

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** Longest duration setting that feeds a timer or statement_timeout: whole days within MAX_TIMER_MS (24d). */
export const MAX_SETTING_MS = Math.floor(MAX_TIMER_MS / UNITS.d) * UNITS.d;

/**
 * A duration with its unit: `7d`, `12h`, `30m`, `45s`, `250ms`, `1.5s`; `0` alone needs none.
 * Returns milliseconds, or undefined when the text is not a duration.
 */
export function parseDuration(text: string): number | undefined {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$/.exec(text);
  if (!m) return undefined;
  if (m[2] === undefined && Number(m[1]) !== 0) return undefined;
  const ms = Number(m[1]) * UNITS[m[2] ?? 'ms'];
  return Number.isFinite(ms) ? Math.round(ms) : undefined;
}

/** Milliseconds in the largest unit that writes them whole (`86400000` → `1d`). */
export function formatMs(ms: number): string {
  for (const [unit, size] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1000],
  ] as const) {
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}

export function duration(
  name: string,
  dflt: string,
  min: number,
  doc: string,
  extra: { section?: string; max?: number } = {},
): Setting<number> {
  const max = extra.max ?? Number.POSITIVE_INFINITY;
  return {
    name,
    default: dflt,
    doc,
    section: extra.section,
    parse(raw) {
      const ms = parseDuration(raw ?? '');
      if (ms === undefined || ms < min || ms > max) {
        const range =
          max === Number.POSITIVE_INFINITY
            ? `at least ${formatMs(min)}`
            : `${formatMs(min)} to ${formatMs(max)}`;
        throw new Error(
          `${name} must be a duration with a unit, such as 250ms, 5s, 30m, 12h or 7d, ${range} (got ${JSON.stringify(raw)})`,
        );
      }
      return ms;
    },
  };
}

/** A setting whose default is written as its variable would be. */
export function setting<T>(
  name: string,
  dflt: string,
  doc: string,
  section: string | undefined,
  parse: (raw: string | undefined) => T,
): Setting<T> {
  return { name, default: dflt, doc, section, parse };
}

export function int(name: string, dflt: number, min: number, doc: string, section?: string): Setting<number> {
  return setting(name, String(dflt), doc, section, (raw) => {
    const n = Number(raw);
    if (raw === undefined || !/^\s*\d+\s*$/.test(raw) || !Number.isSafeInteger(n) || n < min) {
      throw new Error(`${name} must be an integer >= ${min} (got ${JSON.stringify(raw)})`);
    }
    return n;
  });
}

export function bool(name: string, dflt: boolean, doc: string, section?: string): Setting<boolean> {
  return setting(name, String(dflt), doc, section, (raw) => {
    if (raw !== undefined && /^(1|true|yes|on)$/i.test(raw)) return true;
    if (raw !== undefined && /^(0|false|no|off)$/i.test(raw)) return false;
    throw new Error(`${name} must be true or false (got ${JSON.stringify(raw)})`);
  });
}

export function text(name: string, dflt: string, doc: string, section?: string): Setting<string> {
  return { name, default: dflt, doc, section, parse: (raw) => raw ?? dflt };
}

export function optional(name: string, doc: string, section?: string): Setting<string | undefined> {
  return { name, doc, section, parse: (raw) => raw };
}

export function splitList(raw: string): string[] {
  return raw
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

/** A comma-separated list of exact origins (scheme://host[:port]); throws naming the setting. */
export function parseOrigins(name: string, raw: string): string[] {
  const origins = splitList(raw);
  for (const o of origins) {
    let ok = false;
    try {
      ok = new URL(o).origin === o;
    } catch {
      // reported below
    }
    if (!ok)
      throw new Error(
        `${name}: ${JSON.stringify(o)} is not an origin (scheme://host[:port], no path or trailing slash)`,
      );
  }
  return origins;
}
