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
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler';

type ValidatorFactory = ReturnType<typeof AjvCompiler>;
type SerializerFactory = ReturnType<typeof SerializerSelector>;
type Serializer = (data: unknown) => string;

/**
 * One pool of Ajv instances for the process, not one per app: Ajv keeps what it compiled by the
 * schema object, and the routes' schemas are module constants, so a second app in the same process
 * (the tests start hundreds) compiles nothing again. Apps with other Ajv options or shared schemas
 * get their own instance from the pool.
 */
const pool = AjvCompiler();

/** A `schemaController.compilersFactory.buildValidator` for Fastify: no coercion for bodies. */
export function strictBodyValidator(): ValidatorFactory {
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

/**
 * Response serializers made once per process, like the validators: fast-json-stringify's output is
 * a function of the schema and the options alone, so a route schema (a module constant) seen again
 * by another app in the process reuses the function built the first time.
 */
const serializers = new Map<string, WeakMap<object, Serializer>>();

/** A `schemaController.compilersFactory.buildSerializer` for Fastify that keeps what it built. */
export function cachedSerializer(): SerializerFactory {
  const selector = SerializerSelector();
  return ((externalSchemas, options) => {
    const key = JSON.stringify([externalSchemas, options]);
    const built = serializers.get(key) ?? new WeakMap<object, Serializer>();
    serializers.set(key, built);
    const build = selector(externalSchemas, options);
    return (route) => {
      const schema = route.schema as object;
      const serializer = built.get(schema) ?? (build(route) as Serializer);
      built.set(schema, serializer);
      return serializer;
    };
  }) as SerializerFactory;
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
