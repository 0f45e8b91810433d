/**
 * The hub's RFC 6750 answers (draft-08 §Error Responses): the OAuth error code travels only in the
 * `WWW-Authenticate: Bearer` challenge, which also points at the protected resource metadata
 * (RFC 9728 `resource_metadata`); the body is an RFC 9457 problem document with a stable `code` for
 * clients that branch on it. Every presented-token failure is the same `invalid_token` answer
 * whatever the cause, so the answer never tells an attacker why a token failed.
 */
import { STATUS_CODES } from 'node:http';
import type { FastifyReply } from 'fastify';
import { HUB_PATH } from './publish.ts';

/** The metadata path, derived from the hub's (RFC 9728 §3.1). */
export const PRM_PATH = `/.well-known/oauth-protected-resource${HUB_PATH}`;

export type MercureFailure = {
  ok: false;
  status: 400 | 401 | 403;
  wwwAuthenticate: string;
  code: string;
  message: string;
};

/** Where the metadata of `resource` lives: the well-known segment inserted before its path. */
export function resourceMetadataUrl(resource: string | undefined): string | undefined {
  if (!resource) return undefined;
  const u = new URL(resource);
  const path = u.pathname === '/' ? '' : u.pathname.replace(/\/$/, '');
  return `${u.origin}/.well-known/oauth-protected-resource${path}`;
}

export class Challenges {
  private readonly base: string;
  constructor(resource: string | undefined) {
    const meta = resourceMetadataUrl(resource);
    this.base = meta === undefined ? 'Bearer' : `Bearer resource_metadata="${meta}"`;
  }

  private with(error: string): string {
    return this.base === 'Bearer' ? `Bearer error="${error}"` : `${this.base}, error="${error}"`;
  }

  /** No token where one is needed: a bare challenge, no error code (MUST). */
  missing(message: string): MercureFailure {
    return { ok: false, status: 401, wwwAuthenticate: this.base, code: 'token_required', message };
  }

  /** Any failure of a presented token: signature, claims, details, limits (MUST be one answer). */
  invalid(): MercureFailure {
    return {
      ok: false,
      status: 401,
      wwwAuthenticate: this.with('invalid_token'),
      code: 'token_rejected',
      message: 'the access token is not accepted by this hub',
    };
  }

  /** A valid token without the grant. */
  forbidden(message = 'the access token does not grant this'): MercureFailure {
    return {
      ok: false,
      status: 403,
      wwwAuthenticate: this.with('insufficient_scope'),
      code: 'forbidden',
      message,
    };
  }

  /** The token, or how it was presented, is malformed. */
  malformed(message: string): MercureFailure {
    return {
      ok: false,
      status: 400,
      wwwAuthenticate: this.with('invalid_request'),
      code: 'malformed_credentials',
      message,
    };
  }
}

/** Sends a failure: the challenge, and a problem document (RFC 9457) that repeats no OAuth code. */
export function sendMercureError(reply: FastifyReply, err: MercureFailure): FastifyReply {
  return reply
    .code(err.status)
    .header('www-authenticate', err.wwwAuthenticate)
    .header('cache-control', 'no-store')
    .type('application/problem+json')
    .send(
      JSON.stringify({
        type: 'about:blank',
        title: STATUS_CODES[err.status],
        status: err.status,
        detail: err.message,
        code: err.code,
      }),
    );
}
