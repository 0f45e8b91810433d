/**
 * Errors shared by every layer. A module that refuses a request throws ApiError (status, stable code,
 * message); the HTTP layer (src/http/errors.ts) is the one place that turns errors into answers, so
 * the engine and the features never import HTTP code to say "no".
 */

/** A refusal with the status and the stable `code` the API answers it with; `details`: more
 * properties of the answer's body, beside the code and the message (what to do next). */
export class ApiError extends Error {
  constructor(
    readonly statusCode: number,
    readonly code: string,
    message: string,
    readonly headers: Record<string, string> = {},
    readonly details: Record<string, string> = {},
  ) {
    super(message);
  }
}

/** A write that reached a closed writer (shutdown): answered 503 with Retry-After. */
export class ShuttingDownError extends Error {
  constructor() {
    super('commitfeed is shutting down; retry on another instance or after the restart');
  }
}

/** Seconds a client should wait before retrying after a 503. */
export const RETRY_AFTER_S = 2;

/** A 503 the client should retry after RETRY_AFTER_S (the database or the horizon is not ready). */
export function unavailable(code: string, message: string): ApiError {
  return new ApiError(503, code, message, { 'retry-after': String(RETRY_AFTER_S) });
}
