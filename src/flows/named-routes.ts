/**
 * The routes every named flow resource has (stream subscriptions, schedules): list them, show one,
 * delete one, pause and resume one — administration (admin tokens when access control is on). Each
 * resource brings its path, schemas, summaries and operations; its create route is its own.
 */
import type { FastifyInstance } from 'fastify';
import type { ApiError } from '../errors.ts';
import { ADMIN, type NameReq, deletedResponse, nameParams } from './schemas.ts';

export interface NamedResource<T> {
  /** `/v1/schedules`: the list's path; one resource is `<path>/:name`. */
  path: string;
  tags: string[];
  /** The list's property (`{"schedules": [...]}`). */
  listKey: string;
  listResponse: object;
  /** One resource's response schema. */
  response: object;
  summaries: { list: string; show: string; delete: string; pause: string; resume: string };
  /** Every resource (name null), or the one named. */
  list(name: string | null): Promise<T[]>;
  /** False when there was none. */
  remove(name: string): Promise<boolean>;
  /** The resource after the change; undefined when there is none. */
  setPaused(name: string, paused: boolean): Promise<T | undefined>;
  notFound(name: string): ApiError;
  /** Its JSON form (default: as listed). */
  show?(item: T): unknown;
  /** Called after a resume: what runs the resource may have work again. */
  resumed(): void;
}

export function namedResourceRoutes<T>(app: FastifyInstance, r: NamedResource<T>): void {
  const tags = r.tags;
  const show = r.show ?? ((item: T) => item);
  const one = async (name: string): Promise<T> => {
    const [item] = await r.list(name);
    if (!item) throw r.notFound(name);
    return item;
  };
  app.get(
    r.path,
    { config: ADMIN, schema: { tags, summary: r.summaries.list, response: r.listResponse } },
    async () => ({ [r.listKey]: (await r.list(null)).map(show) }),
  );
  app.get<NameReq>(
    `${r.path}/:name`,
    {
      config: ADMIN,
      schema: { tags, summary: r.summaries.show, params: nameParams, response: r.response },
    },
    async (request) => show(await one(request.params.name)),
  );
  app.delete<NameReq>(
    `${r.path}/:name`,
    {
      config: ADMIN,
      schema: { tags, summary: r.summaries.delete, params: nameParams, response: deletedResponse },
    },
    async (request, reply) => {
      if (!(await r.remove(request.params.name))) throw r.notFound(request.params.name);
      return reply.code(204).send();
    },
  );
  for (const action of ['pause', 'resume'] as const) {
    const paused = action === 'pause';
    app.post<NameReq>(
      `${r.path}/:name/${action}`,
      {
        config: ADMIN,
        schema: { tags, summary: r.summaries[action], params: nameParams, response: r.response },
      },
      async (request) => {
        const item = await r.setPaused(request.params.name, paused);
        if (!item) throw r.notFound(request.params.name);
        if (!paused) r.resumed();
        return show(item);
      },
    );
  }
}
