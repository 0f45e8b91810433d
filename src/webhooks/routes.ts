/**
 * Webhook routes (`/v1/webhooks`): endpoints, their delivery log, resends, replays and secret
 * rotation. Administration (admin tokens when access control is on). No SQL here.
 */
import { isIP } from 'node:net';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { afterCommit } from '../db/commit-outcome.ts';
import { ApiError } from '../errors.ts';
import { cursorInFeed } from '../http/read-position.ts';
import {
  type EndpointSettings,
  type EndpointWithSecrets,
  type Mode,
  backlogs,
  listEndpoints,
  withoutSecrets,
} from './endpoints.ts';
import { type WebhookRouteDeps, recoveryRoutes } from './recovery-routes.ts';
import * as S from './schemas.ts';
import { internalName } from './webhooks.ts';

export const WEBHOOK_TAG = {
  name: 'webhooks',
  description: 'every matching committed event POSTed to an HTTP endpoint, signed',
};
const tags = [WEBHOOK_TAG.name];

type Settings = {
  url?: string;
  description?: string | null;
  headers?: Record<string, string>;
  concurrency?: number;
  timeoutSeconds?: number;
  rateLimit?: number | null;
  enabled?: boolean;
};
type CreateReq = {
  Body: Settings & { name: string; streams: string[]; types?: string[] | null; mode: Mode; from: string };
};

/** Headers a delivery sets itself. */
const RESERVED = /^(content-type|content-length|host|user-agent|connection|transfer-encoding|webhook-.*)$/i;

export function webhookRoutes(app: FastifyInstance, deps: WebhookRouteDeps): void {
  const { webhooks } = deps;
  const route = { config: S.ADMIN };
  app.post<CreateReq>(
    '/v1/webhooks',
    {
      ...route,
      schema: {
        tags,
        summary: 'Create a webhook endpoint (its secret is in this response only)',
        body: S.createBody,
        response: S.createdResponse,
      },
    },
    (request, reply) => createOne(deps, request, reply),
  );
  app.get(
    '/v1/webhooks',
    {
      ...route,
      schema: {
        tags,
        summary: 'Every webhook endpoint, with its backlog (no secrets)',
        response: S.listResponse,
      },
    },
    async () => ({ webhooks: await show(deps, await listEndpoints(deps.db, null)) }),
  );
  app.get<S.NameReq>(
    '/v1/webhooks/:name',
    {
      ...route,
      schema: {
        tags,
        summary: 'One webhook endpoint: settings, counts, backlog and lag (no secret)',
        params: S.nameParams,
        response: S.endpointResponse,
      },
    },
    async (request) => (await show(deps, [await webhooks.get(request.params.name)]))[0],
  );
  app.patch<S.NameReq & { Body: Settings }>(
    '/v1/webhooks/:name',
    {
      ...route,
      schema: {
        tags,
        summary: 'Change a webhook endpoint (enabled: false pauses its deliveries, true resumes them)',
        params: S.nameParams,
        body: S.updateBody,
        response: S.endpointResponse,
      },
    },
    (request) => patchOne(deps, request.params.name, request.body),
  );
  app.delete<S.NameReq>(
    '/v1/webhooks/:name',
    {
      ...route,
      schema: {
        tags,
        summary: 'Delete a webhook endpoint, its pending deliveries and its delivery log',
        params: S.nameParams,
        response: S.deletedResponse,
      },
    },
    async (request, reply) => {
      await webhooks.remove(request.params.name);
      return reply.code(204).send();
    },
  );
  recoveryRoutes(app, deps, tags);
}

async function createOne(
  deps: WebhookRouteDeps,
  request: FastifyRequest<CreateReq>,
  reply: FastifyReply,
): Promise<FastifyReply> {
  const { webhooks } = deps;
  const b = request.body;
  const from =
    b.from === 'earliest' || b.from === 'latest'
      ? b.from
      : await cursorInFeed(deps.feed, deps.config, b.from, 'from');
  const s = checkedSettings(deps, b);
  if (b.mode === 'ordered' && (b.concurrency ?? 1) !== 1) {
    throw new ApiError(
      400,
      'invalid_request',
      'an ordered endpoint delivers one event at a time: leave concurrency out, or choose mode concurrent',
    );
  }
  const e = await webhooks.create({
    name: b.name,
    streams: [...new Set(b.streams)],
    types: b.types ? [...new Set(b.types)] : null,
    mode: b.mode,
    from,
    url: s.url!,
    description: s.description ?? null,
    headers: s.headers ?? {},
    concurrency: b.mode === 'ordered' ? 1 : (s.concurrency ?? 10),
    timeoutMs: s.timeoutMs ?? deps.config.webhookTimeoutMs,
    rateLimit: s.rateLimit ?? null,
    enabled: s.enabled ?? true,
  });
  // The endpoint is committed: a backlog read that finds the database gone loses only the answer.
  return reply.code(201).send({ ...(await afterCommit(() => show(deps, [e])))[0], secret: e.secret });
}

async function patchOne(
  deps: WebhookRouteDeps,
  name: string,
  body: Settings,
): Promise<Record<string, unknown>> {
  const current = await deps.webhooks.get(name);
  const s = checkedSettings(deps, body);
  if (current.mode === 'ordered' && s.concurrency !== undefined && s.concurrency !== 1) {
    throw new ApiError(
      400,
      'invalid_request',
      'an ordered endpoint delivers one event at a time: its concurrency stays 1',
    );
  }
  const updated = await deps.webhooks.update(name, s);
  return (await afterCommit(() => show(deps, [updated])))[0];
}

/** A body's settings, checked: the URL (http(s), no literal refused address) and the headers. */
function checkedSettings(deps: WebhookRouteDeps, b: Settings): Partial<EndpointSettings> {
  const out: Partial<EndpointSettings> = {};
  if (b.url !== undefined) {
    let url: URL;
    try {
      url = new URL(b.url);
    } catch {
      throw new ApiError(400, 'invalid_url', `url is not a URL: ${JSON.stringify(b.url.slice(0, 200))}`);
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new ApiError(400, 'invalid_url', `url must be http:// or https:// (got ${url.protocol})`);
    }
    const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
    const refused = isIP(host) !== 0 ? deps.webhooks.guard.refusal(host) : null;
    if (refused) throw new ApiError(400, 'webhook_url_refused', `deliveries may not go to ${refused}`);
    out.url = url.href;
  }
  if (b.headers !== undefined) {
    const bad = Object.keys(b.headers).find(
      (h) => RESERVED.test(h) || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(h),
    );
    if (bad !== undefined)
      throw new ApiError(
        400,
        'invalid_header',
        `header ${JSON.stringify(bad)} may not be set (reserved, or not a header name)`,
      );
    const badValue = Object.entries(b.headers).find(([, v]) => /[\r\n\0]/.test(v));
    if (badValue)
      throw new ApiError(400, 'invalid_header', `header ${badValue[0]} has a line break or NUL in its value`);
    out.headers = b.headers;
  }
  if (b.description !== undefined) out.description = b.description;
  if (b.concurrency !== undefined) out.concurrency = b.concurrency;
  if (b.timeoutSeconds !== undefined) out.timeoutMs = Math.round(b.timeoutSeconds * 1000);
  if (b.rateLimit !== undefined) out.rateLimit = b.rateLimit;
  if (b.enabled !== undefined) out.enabled = b.enabled;
  return out;
}

/** The endpoints' public form: no secrets, timeouts in seconds, with their backlogs. */
async function show(deps: WebhookRouteDeps, es: EndpointWithSecrets[]): Promise<Record<string, unknown>[]> {
  const b = await backlogs(
    deps.db,
    es.map((e) => internalName(e.name)),
  );
  return es.map((e) => {
    const { timeoutMs, ...rest } = withoutSecrets(e);
    return { ...rest, timeoutSeconds: timeoutMs / 1000, backlog: b.get(internalName(e.name)) };
  });
}
