/**
 * Webhook recovery and inspection routes: secret rotation, the delivery log, resends and replays.
 * Administration (admin tokens when access control is on). No SQL here.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ApiError } from '../errors.ts';
import { formatCursor } from '../feed/cursor.ts';
import type { Feed } from '../feed/feed.ts';
import { cursorInFeed } from '../http/read-position.ts';
import { listAttempts } from './attempts.ts';
import { replayFrom, resendEvent, resendFailed } from './recovery.ts';
import type { Config } from '../config/config.ts';
import type { Db } from '../db/database.ts';
import * as S from './schemas.ts';
import { type Webhooks, internalName, notFound } from './webhooks.ts';

export interface WebhookRouteDeps {
  db: Db;
  config: Config;
  feed: Feed;
  webhooks: Webhooks;
}

export function recoveryRoutes(app: FastifyInstance, deps: WebhookRouteDeps, tags: string[]): void {
  const { webhooks, db } = deps;
  const route = { config: S.ADMIN };
  app.post<S.NameReq & { Body: { overlapSeconds?: number } | null }>(
    '/v1/webhooks/:name/rotate-secret',
    {
      ...route,
      schema: {
        tags,
        summary: 'A new signing secret; the old one keeps signing during the overlap',
        params: S.nameParams,
        body: S.rotateBody,
        response: S.rotateResponse,
      },
    },
    async (request) => {
      const overlap = request.body?.overlapSeconds;
      const e = await webhooks.rotate(
        request.params.name,
        overlap === undefined ? undefined : overlap * 1000,
      );
      return { secret: e.secret, previousValidUntil: new Date(e.previousUntil ?? Date.now()).toISOString() };
    },
  );
  app.get<S.NameReq & { Querystring: { event?: string; limit: number; before?: string } }>(
    '/v1/webhooks/:name/attempts',
    {
      ...route,
      schema: {
        tags,
        summary: "The endpoint's delivery log, newest first: every attempt's time, status, latency, response",
        params: S.nameParams,
        querystring: S.attemptsQuery,
        response: S.attemptsResponse,
      },
    },
    async (request) => {
      await webhooks.get(request.params.name);
      const q = request.query;
      return {
        attempts: await listAttempts(db, request.params.name, {
          eventIds: q.event === undefined ? undefined : await eventIds(deps, q.event),
          limit: q.limit,
          before: q.before,
        }),
      };
    },
  );
  app.post<S.NameReq & { Body: { event?: string; failedSince?: string } }>(
    '/v1/webhooks/:name/resend',
    {
      ...route,
      schema: {
        tags,
        summary: 'Resend one event, or every delivery that failed since a time',
        params: S.nameParams,
        body: S.resendBody,
        response: S.resendResponse,
      },
    },
    async (request) => resend(deps, request),
  );
  app.post<S.NameReq & { Body: { from: string } }>(
    '/v1/webhooks/:name/replay',
    {
      ...route,
      schema: {
        tags,
        summary: 'Deliver again every matching event after a cursor, or every retained one',
        params: S.nameParams,
        body: S.replayBody,
        response: S.replayResponse,
      },
    },
    (request) => replay(deps, request.params.name, request.body.from),
  );
}

async function resend(
  deps: WebhookRouteDeps,
  request: FastifyRequest<S.NameReq & { Body: { event?: string; failedSince?: string } }>,
): Promise<{ resent: number }> {
  const name = request.params.name;
  await deps.webhooks.get(name);
  const b = request.body;
  if (b.failedSince !== undefined) {
    return { resent: await resendFailed(deps.db, internalName(name), new Date(b.failedSince)) };
  }
  const id = await cursorInFeed(deps.feed, deps.config, b.event ?? '', 'event');
  const job = await resendEvent(deps.db, internalName(name), id);
  if (job === null) {
    throw new ApiError(
      404,
      'event_not_found',
      `no retained event ${b.event} of this endpoint's streams and types`,
    );
  }
  return { resent: 1 };
}

async function replay(
  deps: WebhookRouteDeps,
  name: string,
  f: string,
): Promise<{ from: string; lost: boolean; trimMark: string }> {
  await deps.webhooks.get(name);
  const from = f === 'earliest' ? 'earliest' : await cursorInFeed(deps.feed, deps.config, f, 'from');
  const r = await replayFrom(deps.db, internalName(name), from);
  if (!r.moved) throw notFound(name);
  deps.webhooks.changed();
  const tag = deps.feed.history.tag;
  return {
    from: from === 'earliest' ? from : formatCursor(from, tag),
    lost: r.lost,
    trimMark: formatCursor(r.trimMark, tag),
  };
}

/**
 * The texts the delivery log may hold for the event `id` names (either form): its id as delivered
 * now (tagged), and as delivered before webhook ids carried the feed's tag.
 */
async function eventIds(deps: WebhookRouteDeps, id: string): Promise<string[]> {
  const c = await cursorInFeed(deps.feed, deps.config, id, 'event');
  return [formatCursor(c, deps.feed.history.tag), formatCursor(c)];
}
