/**
 * Errors as the API shows them: `{statusCode, error, message, code}` with a stable `code` that
 * clients can branch on. Every 4xx is raised before anything is written.
 */
import { STATUS_CODES } from 'node:http';
import type { FastifyError, FastifyInstance } from 'fastify';
import { isUnavailable } from '../db/database.ts';

export class ApiError extends Error {
  constructor(
    readonly statusCode: number,
    readonly code: string,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

export function errorBody(statusCode: number, code: string, message: string) {
  return { statusCode, error: STATUS_CODES[statusCode] ?? 'Error', code, message };
}

/** Seconds a client should wait before retrying after a 503. */
export const RETRY_AFTER_S = 2;

/** Maps a failed schema check to a stable code by where it failed. */
function validationCode(err: FastifyError): string {
  const first = err.validation?.[0];
  const field = (first?.instancePath ?? '').split('/')[1] ?? '';
  if (err.validationContext === 'params') return 'invalid_name';
  if (err.validationContext === 'querystring') {
    if (first?.keyword === 'additionalProperties') return 'unknown_parameter';
    if (field === 'after') return 'invalid_cursor';
    if (field === 'stream' && first?.keyword === 'pattern') return 'invalid_name';
  }
  return 'invalid_request';
}

const FASTIFY_CODES: Record<string, [number, string]> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: [415, 'unsupported_media_type'],
  FST_ERR_CTP_BODY_TOO_LARGE: [413, 'body_too_large'],
  FST_ERR_CTP_EMPTY_JSON_BODY: [400, 'invalid_json'],
  FST_ERR_CTP_INVALID_JSON_BODY: [400, 'invalid_json'],
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: [400, 'invalid_request'],
};

export function installErrorHandlers(app: FastifyInstance): void {
  app.setErrorHandler((err: FastifyError, request, reply) => {
    if (err instanceof ApiError) {
      reply.headers(err.headers);
      return reply.code(err.statusCode).send(errorBody(err.statusCode, err.code, err.message));
    }
    if (err.validation) {
      const message = err.message.replace(/^(body|params|querystring|headers)/, (m) =>
        m === 'querystring' ? 'query' : m,
      );
      return reply.code(400).send(errorBody(400, validationCode(err), message));
    }
    const known = err.code ? FASTIFY_CODES[err.code] : undefined;
    if (known) {
      const message = known[1] === 'invalid_json' ? `body is not valid JSON: ${err.message}` : err.message;
      return reply.code(known[0]).send(errorBody(known[0], known[1], message));
    }
    if (isUnavailable(err)) {
      request.log.warn({ err: err.message }, 'database unavailable');
      reply.header('retry-after', String(RETRY_AFTER_S));
      return reply
        .code(503)
        .send(errorBody(503, 'unavailable', 'the database is unavailable; retry after a short wait'));
    }
    if (err.statusCode && err.statusCode >= 400 && err.statusCode < 500) {
      return reply.code(err.statusCode).send(errorBody(err.statusCode, 'invalid_request', err.message));
    }
    request.log.error({ err }, 'request failed');
    return reply.code(500).send(errorBody(500, 'internal', 'internal error; see the server log'));
  });
  app.setNotFoundHandler((request, reply) => {
    reply
      .code(404)
      .send(errorBody(404, 'not_found', `no route for ${request.method} ${request.url.split('?')[0]}`));
  });
}
