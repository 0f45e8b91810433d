/**
 * Schema validation with two Ajv instances: request bodies are JSON and already typed, so they are
 * checked as they are (a `"type": 5` or `"priority": "3"` is a 400, not a silently converted value);
 * query strings, path parameters and headers arrive as text, so they keep Ajv's type coercion
 * (`?limit=10` is the number 10, a single `?stream=a` the array `["a"]`).
 *
 * Both instances keep the server's Ajv options (`removeAdditional: false`: unknown properties and
 * parameters are errors; `allErrors: false`: validation stops at the first failure, which is the one
 * the error names, and a hostile body cannot make Ajv collect errors without bound).
 */
import AjvCompiler from '@fastify/ajv-compiler';

type ValidatorFactory = ReturnType<typeof AjvCompiler>;

/** A `schemaController.compilersFactory.buildValidator` for Fastify: no coercion for bodies. */
export function strictBodyValidator(): ValidatorFactory {
  const pool = AjvCompiler();
  return ((externalSchemas, options) => {
    const coercing = pool(externalSchemas, options);
    // Fastify passes Ajv (not JTD) options here.
    const strict = pool(externalSchemas, {
      ...options,
      customOptions: { ...options?.customOptions, coerceTypes: false },
    } as typeof options);
    return (route) => (route.httpPart === 'body' ? strict : coercing)(route);
  }) as ValidatorFactory;
}

/** Most items one request may carry: events of a publish, jobs of an enqueue, acks of a batch ack. */
export const MAX_BATCH = 1000;

/**
 * The schema of a body that is one `item` (an object) or an array of 1..`maxItems` of them. The
 * branch is chosen by the body's JSON type (if/then/else rather than oneOf), so a body with one
 * mistake is checked against one branch only and the error names that mistake alone, not every
 * branch's complaint.
 */
export function batchOf<T extends object>(item: T, maxItems: number, description: string) {
  return {
    description,
    if: { type: 'array' },
    // biome-ignore lint/suspicious/noThenProperty: JSON Schema's keyword; an object, so not a thenable.
    then: { type: 'array', minItems: 1, maxItems, items: item },
    else: item,
  } as const;
}
