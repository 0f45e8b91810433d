/**
 * The access-control mode (`AUTH`) and the start-up refusal of unsafe settings: `jwt` when any key is
 * configured; `off` only when asked for, or when no key is configured and HOST is a loopback address
 * (with a loud warning either way). A non-loopback HOST without keys and without `AUTH=off` refuses
 * to start.
 */
import type { Config } from '../config/config.ts';
import { hasKeys } from './verifier.ts';

export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || /^127\.\d+\.\d+\.\d+$/.test(h) || /^::ffff:127\./.test(h);
}

/** The effective mode and the warning to log, or an error when the configuration is unsafe. */
export function resolveAuthMode(config: Config): { mode: 'off' | 'jwt'; warning?: string } {
  const keys = hasKeys(config);
  if (config.auth === 'jwt') {
    if (!keys) {
      throw new Error(
        'AUTH=jwt needs a key: set JWT_SECRET, JWT_PUBLIC_KEY (or JWT_PUBLIC_KEY_FILE) or JWKS_FILE',
      );
    }
    return { mode: 'jwt' };
  }
  if (config.auth === 'off') {
    return {
      mode: 'off',
      warning: `AUTH=off: access control is DISABLED — anyone who can reach ${config.host}:${config.port} can publish, read and administer everything${keys ? ' (the configured JWT keys are ignored)' : ''}`,
    };
  }
  if (keys) return { mode: 'jwt' };
  if (isLoopback(config.host)) {
    return {
      mode: 'off',
      warning: `no JWT key configured: access control is OFF (allowed only because HOST=${config.host} is loopback). Set JWT_SECRET (or JWT_PUBLIC_KEY / JWKS_FILE) to require tokens`,
    };
  }
  throw new Error(
    `HOST=${config.host} is reachable from other machines but no JWT key is configured: set JWT_SECRET, JWT_PUBLIC_KEY(_FILE) or JWKS_FILE to require tokens, or AUTH=off to run without access control`,
  );
}
