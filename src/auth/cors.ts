/**
 * CORS (CORS_ORIGINS): exact origins are echoed with credentials allowed; `*` allows any origin
 * without credentials. Origins are checked at start-up, so a typo fails loudly instead of silently
 * blocking browsers.
 */
import cors from '@fastify/cors';
import type { FastifyInstance } from 'fastify';
import { parseOrigins } from '../config/settings.ts';

function validateOrigins(origins: string[]): void {
  if (origins.includes('*')) {
    if (origins.length > 1) throw new Error('CORS_ORIGINS: "*" cannot be combined with other origins');
    return;
  }
  parseOrigins('CORS_ORIGINS', origins.join(','));
}

/** Registers @fastify/cors for `origins` (nothing when the list is empty). */
export async function registerCors(app: FastifyInstance, origins: string[]): Promise<void> {
  if (origins.length === 0) return;
  validateOrigins(origins);
  const any = origins[0] === '*';
  await app.register(cors, {
    // An array of exact origins: the request's origin is echoed when listed (with Vary: Origin).
    origin: any ? '*' : origins,
    // Cookies and Authorization from browsers only for listed origins, never with `*`.
    credentials: !any,
    // QUERY: the Mercure hub's subscribe with its matchers in the body (not CORS-safelisted).
    methods: ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'QUERY'],
    allowedHeaders: ['Authorization', 'Content-Type', 'Last-Event-ID', 'Accept', 'Cache-Control'],
    // Link and Mercure-Last-Event-ID: the Mercure hub's discovery and reconnection headers.
    exposedHeaders: ['Retry-After', 'WWW-Authenticate', 'Link', 'Mercure-Last-Event-ID'],
    maxAge: 600,
    strictPreflight: false,
  });
}
