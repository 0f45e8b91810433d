/**
 * POST /.well-known/mercure (draft-08 §Publication): one update from a form body, checked (publish.ts),
 * authorized on every one of its topics, and written through the feed's group commit with native
 * publishes (one statement and one notify per group; the tailer holds the update rather than reading
 * it back). Answers 200 text/plain with the update's id. No SQL here.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Batcher } from '../commit/batcher.ts';
import type { Config } from '../config/config.ts';
import { ApiError } from '../errors.ts';
import type { CheckedEventInput } from '../feed/event.ts';
import type { AppendResult } from '../feed/queries/append.ts';
import { errorSchema } from '../http/errors.ts';
import type { MercureAuthorizer } from './authorize.ts';
import type { MercureIds } from './ids.ts';
import { sendMercureError } from './challenge.ts';
import { parseForm } from './form.ts';
import type { MercureStats } from './metrics.ts';
import { HUB_PATH, publishedId, updateEvent, updateFromForm } from './publish.ts';

export interface PublishRouteDeps {
  config: Config;
  authorizer: MercureAuthorizer;
  /** The feed's group commit (Feed.batcher). */
  batcher: Batcher<CheckedEventInput, AppendResult>;
  stats: MercureStats;
  /** The database's generated ids (ids.ts). */
  ids: MercureIds;
}

const publishSchema = {
  summary: 'Mercure: publish an update',
  description:
    'Body: application/x-www-form-urlencoded with `topic` (one or more; the first is canonical), `data`, `private`, `id`, `type`, `retry` (draft-dunglas-mercure-08). Answers 200 text/plain with the update id. See docs/mercure.md.',
  tags: ['mercure'],
  consumes: ['application/x-www-form-urlencoded'],
  response: {
    200: {
      description: 'the id of the update',
      content: { 'text/plain': { schema: { type: 'string' } } },
    },
    400: errorSchema,
    401: errorSchema,
    403: errorSchema,
    413: errorSchema,
    415: errorSchema,
  },
};

/** Registers the publish route; `app` parses form bodies as raw bytes (routes.ts). */
export function publishRoute(app: FastifyInstance, deps: PublishRouteDeps): void {
  app.post(HUB_PATH, { config: { access: 'public' }, schema: publishSchema }, (request, reply) =>
    publishUpdate(deps, request, reply),
  );
}

async function publishUpdate(
  deps: PublishRouteDeps,
  request: FastifyRequest,
  reply: FastifyReply,
): Promise<FastifyReply> {
  const { config, authorizer, batcher, stats } = deps;
  if (!Buffer.isBuffer(request.body)) {
    throw new ApiError(
      415,
      'unsupported_media_type',
      'a Mercure publish is an application/x-www-form-urlencoded body',
    );
  }
  const update = updateFromForm(parseForm(request.body, 'body'), authorizer.hub, config.maxEventBytes);
  const auth = await authorizer.authenticate(request, 'publish');
  if (!auth.ok) return sendMercureError(reply, auth);
  // A publish grant on EVERY topic of the update (draft §Publishers), else nothing is stored.
  const grants = auth.grants;
  if (grants === null || !authorizer.canPublish(grants, update.topics)) {
    const no = authorizer.forbidden('the token does not grant publishing on every topic of the update');
    if (!no.ok) return sendMercureError(reply, no);
  }
  const [written] = await batcher.publish([updateEvent(update)]);
  const id = publishedId(update, written.id, deps.ids);
  stats.published++;
  return reply.type('text/plain; charset=utf-8').send(id);
}
