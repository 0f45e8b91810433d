/**
 * The write routes that take one item or a batch (`POST /v1/streams/:stream/events`,
 * `POST /v1/queues/:queue/jobs`) work the same way: the token must allow the action on the name in
 * the path; every item is checked first (a batch error names its item, `events[2]`); the batch is
 * written at once (all or nothing); and the status says what happened: 201 created, 200 for a
 * single item that repeated an existing key (nothing new).
 */
import type { FastifyInstance, FastifySchema } from 'fastify';
import { authorize } from '../auth/policy.ts';
import type { Action } from '../auth/tokens.ts';

export interface OneOrBatchRoute<B, I, R extends { duplicate: boolean }> {
  url: string;
  /** The path parameter naming the stream or queue, and what the token must allow on it. */
  param: string;
  action: Action;
  schema: FastifySchema;
  /** The batch's property in the answer: `{"events": [...]}`. */
  list: string;
  /** Checks one item; `where` names a batch item in errors (undefined for a single item). */
  check: (name: string, item: B, where: string | undefined) => I;
  write: (inputs: I[]) => Promise<R[]>;
  /** What the answer says of each result. */
  show: (result: R) => object;
}

/**
 * Registers a one-or-batch write route.
 *
 * @example oneOrBatchRoute(app, { url: '/v1/queues/:queue/jobs', param: 'queue', action: 'enqueue', ... });
 */
export function oneOrBatchRoute<B, I, R extends { duplicate: boolean }>(
  app: FastifyInstance,
  route: OneOrBatchRoute<B, I, R>,
): void {
  app.post(route.url, { schema: route.schema }, async (request, reply) => {
    const name = (request.params as Record<string, string>)[route.param];
    authorize(request, route.action, name);
    // The route's body schema has checked the shape; `check` checks each item's content.
    const body = request.body as B | B[];
    if (Array.isArray(body)) {
      const inputs = body.map((item, i) => route.check(name, item, `${route.list}[${i}]`));
      const results = await route.write(inputs);
      return reply.code(201).send({ [route.list]: results.map(route.show) });
    }
    const [result] = await route.write([route.check(name, body, undefined)]);
    return reply.code(result.duplicate ? 200 : 201).send(route.show(result));
  });
}
