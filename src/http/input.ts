/**
 * Hostile-input guards shared by every route.
 *
 * The JSON body parser is stricter than Fastify's default in two ways that hostile clients exploit:
 * bytes that are not valid UTF-8 are refused (the default decodes them to U+FFFD and stores altered
 * text), and nesting deeper than MAX_JSON_DEPTH is refused before JSON.parse (a 1 MB body of `[`
 * would otherwise reach JSON.stringify and PostgreSQL's parser as a 500,000-level tree).
 * A number too large for a double (`1e400`) is refused too: JSON.parse makes it Infinity, which would
 * be stored as `null`. Prototype-poisoning keys (`__proto__`, `constructor.prototype`) stay errors, as in the default.
 */
import { isUtf8 } from 'node:buffer';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ApiError } from '../errors.ts';

/** Deepest nesting of arrays and objects accepted in a request body. */
export const MAX_JSON_DEPTH = 64;

/** The deepest nesting in JSON text (strings skipped); stops counting once past `limit`. */
export function jsonDepth(text: string, limit = Number.POSITIVE_INFINITY): number {
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 92 /* \ */) i++;
      else if (c === 34 /* " */) inString = false;
    } else if (c === 34) inString = true;
    else if (c === 91 /* [ */ || c === 123 /* { */) {
      if (++depth > max) {
        max = depth;
        if (max > limit) return max;
      }
    } else if (c === 93 /* ] */ || c === 125 /* } */) depth--;
  }
  return max;
}

const MAYBE_HUGE = /[eE]\+?\d{3}|\d{300}/;

export function installJsonParser(app: FastifyInstance): void {
  const parse = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    const buf = body as Buffer;
    if (!isUtf8(buf)) {
      return done(new ApiError(400, 'invalid_json', 'body is not valid UTF-8'), undefined);
    }
    const text = buf.toString('utf8');
    // Nesting deeper than the limit needs at least that many characters.
    if (text.length > MAX_JSON_DEPTH && jsonDepth(text, MAX_JSON_DEPTH) > MAX_JSON_DEPTH) {
      return done(
        new ApiError(400, 'too_deep', `body nests arrays/objects deeper than ${MAX_JSON_DEPTH} levels`),
        undefined,
      );
    }
    // Only text with a long exponent or a very long digit run can overflow: check those precisely.
    if (MAYBE_HUGE.test(text)) {
      try {
        JSON.parse(text, (_k, v) => {
          if (typeof v === 'number' && !Number.isFinite(v)) throw new RangeError('overflow');
          return v;
        });
      } catch (err) {
        if (err instanceof RangeError) {
          return done(
            new ApiError(400, 'invalid_json', 'body has a number too large for a 64-bit float'),
            undefined,
          );
        }
        // Malformed JSON: the parser below reports it.
      }
    }
    parse(request, text, done);
  });
}

/**
 * Query and path numbers must be finite. Ajv's type coercion turns `?limit=1e309` or `?wait=Infinity`
 * into Infinity and lets it past `maximum`; a long-poll would then wait forever and a read would have
 * no page bound. Runs after validation, so only values the schema typed as numbers are checked.
 */
export function installFiniteNumbers(app: FastifyInstance): void {
  // Only on the routes whose query or path schema can make a number: a route's hook runs on each of
  // its requests, and most routes (the publish among them) have none to check.
  app.addHook('onRoute', (route) => {
    const schema = route.schema as { querystring?: unknown; query?: unknown; params?: unknown } | undefined;
    if (!makesNumbers(schema?.querystring ?? schema?.query) && !makesNumbers(schema?.params)) return;
    const own = route.preHandler;
    route.preHandler =
      own === undefined ? [finiteNumbers] : [finiteNumbers, ...(Array.isArray(own) ? own : [own])];
  });
}

/** A callback hook with plain loops: it runs on every request of its routes. */
function finiteNumbers(request: FastifyRequest, _reply: FastifyReply, done: (err?: Error) => void): void {
  done(nonFinite(request.query, 'query') ?? nonFinite(request.params, 'path'));
}

/** True when the schema may coerce a value to a number: a number or integer type anywhere in it, or
 * anything it refers to (a `$ref` is not followed: counted as a number, to be safe). */
function makesNumbers(schema: unknown): boolean {
  if (schema === null || typeof schema !== 'object') return false;
  for (const [k, v] of Object.entries(schema)) {
    if (k === '$ref') return true;
    if (k === 'type' && (v === 'number' || v === 'integer')) return true;
    if (k === 'type' && Array.isArray(v) && (v.includes('number') || v.includes('integer'))) return true;
    if (makesNumbers(v)) return true;
  }
  return false;
}

function nonFinite(values: unknown, where: string): ApiError | undefined {
  if (values === null || typeof values !== 'object') return undefined;
  for (const k in values) {
    if (!Object.hasOwn(values, k)) continue;
    const v = (values as Record<string, unknown>)[k];
    if (typeof v === 'number' && !Number.isFinite(v)) {
      return new ApiError(400, 'invalid_request', `${where} parameter "${k}" is out of range`);
    }
  }
  return undefined;
}
