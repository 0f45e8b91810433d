/**
 * Errors as the API shows them: `{statusCode, error, code, message}` with a stable `code` that
 * clients can branch on, the same on every route. Every 4xx is raised before anything is written.
 * A request that fails its schema gets one message naming the one field and rule that failed
 * (`body/0/type must be string`, `body/data is required`), whatever the route.
 */
import { STATUS_CODES } from 'node:http';
import type { FastifyError, FastifyInstance, FastifyReply } from 'fastify';
import { ApiError, RETRY_AFTER_S, ShuttingDownError } from '../errors.ts';
import { CommitUnknownError, isUnavailable } from '../db/commit-outcome.ts';

/** The response schema of every error (OpenAPI and serialisation). */
export const errorSchema = {
  type: 'object',
  required: ['statusCode', 'error', 'code', 'message'],
  properties: {
    statusCode: { type: 'integer' },
    error: { type: 'string', description: 'the HTTP reason phrase' },
    code: { type: 'string', description: 'stable, for clients to branch on (e.g. invalid_request)' },
    message: { type: 'string', description: 'for people: what failed and where' },
  },
} as const;

export function errorBody(statusCode: number, code: string, message: string) {
  return { statusCode, error: STATUS_CODES[statusCode] ?? 'Error', code, message };
}

/** Where a failed schema check happened, as messages name it. */
const PARTS: Record<string, string> = {
  body: 'body',
  querystring: 'query',
  params: 'params',
  headers: 'headers',
};

/**
 * The message of a failed schema check: its first (with `allErrors: false`, its only meaningful)
 * error, as `<part><json pointer> <rule>`. Ajv's own text for a missing or unknown property names the
 * object, not the property; these two name the property.
 */
export function validationMessage(err: FastifyError): string {
  const first = err.validation?.[0];
  if (first === undefined) return err.message;
  const path = `${PARTS[err.validationContext ?? ''] ?? err.validationContext ?? 'request'}${first.instancePath ?? ''}`;
  const params = first.params as Record<string, unknown>;
  if (first.keyword === 'required') return `${path}/${String(params.missingProperty)} is required`;
  if (first.keyword === 'additionalProperties') {
    const what = err.validationContext === 'querystring' ? 'parameter' : 'property';
    return `${path}/${String(params.additionalProperty)} is not a known ${what}`;
  }
  return `${path} ${first.message ?? 'is invalid'}`;
}

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

const COMMIT_UNKNOWN =
  'the database connection was lost before the commit of the write was confirmed: it may have been stored. Retry with the same idempotency key; "duplicate": true in the answer means the first attempt was stored';

/** A 503 with Retry-After: nothing the client sent was wrong; the same request may succeed later. */
function retryLater(reply: FastifyReply, code: string, message: string): FastifyReply {
  reply.header('retry-after', String(RETRY_AFTER_S));
  return reply.code(503).send(errorBody(503, code, message));
}

export function installErrorHandlers(app: FastifyInstance): void {
  app.setErrorHandler((err: FastifyError, request, reply) => {
    if (err instanceof ApiError) {
      reply.headers(err.headers);
      return reply
        .code(err.statusCode)
        .send({ ...errorBody(err.statusCode, err.code, err.message), ...err.details });
    }
    if (err.validation) {
      return reply.code(400).send(errorBody(400, validationCode(err), validationMessage(err)));
    }
    const known = err.code ? FASTIFY_CODES[err.code] : undefined;
    if (known) {
      const message = known[1] === 'invalid_json' ? `body is not valid JSON: ${err.message}` : err.message;
      return reply.code(known[0]).send(errorBody(known[0], known[1], message));
    }
    if (err instanceof ShuttingDownError) return retryLater(reply, 'shutting_down', err.message);
    // A GET or HEAD stores nothing: a read that lost its answer (CommitUnknownError cannot tell a
    // read from a write) is plainly unavailable to it.
    if (err instanceof CommitUnknownError && request.method !== 'GET' && request.method !== 'HEAD') {
      // Not "nothing stored": the client must retry with the same key to learn whether it was.
      request.log.warn({ err: err.message }, 'commit outcome unknown');
      return retryLater(reply, 'commit_unknown', COMMIT_UNKNOWN);
    }
    if (isUnavailable(err)) {
      request.log.warn({ err: err.message }, 'database unavailable');
      return retryLater(reply, 'unavailable', 'the database is unavailable; retry after a short wait');
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
