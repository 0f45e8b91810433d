/**
 * Hub discovery (draft-08 §Discovery): the OAuth protected resource metadata of the hub (RFC 9728)
 * at the path derived from the hub's URL, and mercureLink, which builds the `Link: <hub>;
 * rel="mercure"` header a publisher adds to the resources it serves (a pure function: commitfeed
 * used as a library, or any web framework, sets it on its own responses).
 *
 * The metadata is built once from configuration and is public; it is served only when
 * MERCURE_RESOURCE is set (the `resource` member is required and is never derived from a request).
 */
import type { FastifyInstance } from 'fastify';
import type { Config } from '../config/config.ts';
import { DETAIL_TYPE } from './issuers.ts';
import { PRM_PATH } from './challenge.ts';

export interface ProtectedResourceMetadata {
  resource: string;
  authorization_details_types_supported: string[];
  bearer_methods_supported: string[];
  mercure_cookie: string;
  mercure_subscriptions?: true;
}

/** The metadata document: `header` is the only RFC 6750 method; the cookie has its own member. */
export function protectedResourceMetadata(
  config: Config,
  opts: { activeSubscriptions: boolean },
): ProtectedResourceMetadata | undefined {
  if (!config.mercureResource) return undefined;
  return {
    resource: config.mercureResource,
    authorization_details_types_supported: [DETAIL_TYPE],
    bearer_methods_supported: ['header'],
    mercure_cookie: config.mercureCookie,
    ...(opts.activeSubscriptions ? { mercure_subscriptions: true as const } : {}),
  };
}

const prmSchema = {
  type: 'object',
  required: ['resource'],
  properties: {
    resource: { type: 'string', description: 'the hub’s resource identifier: the `aud` its tokens carry' },
    authorization_details_types_supported: { type: 'array', items: { type: 'string' } },
    bearer_methods_supported: { type: 'array', items: { type: 'string' } },
    mercure_cookie: { type: 'string', description: 'the cookie the hub also reads the token from' },
    mercure_subscriptions: { type: 'boolean', description: 'active subscriptions are offered' },
  },
} as const;

/** Registers GET PRM_PATH (public). */
export function discoveryRoutes(
  app: FastifyInstance,
  config: Config,
  opts: { activeSubscriptions: boolean },
): void {
  const doc = protectedResourceMetadata(config, opts);
  if (doc === undefined) return;
  const body = JSON.stringify(doc);
  app.get(
    PRM_PATH,
    {
      config: { access: 'public' },
      schema: {
        summary: 'OAuth protected resource metadata of the Mercure hub (RFC 9728)',
        tags: ['mercure'],
        response: { 200: prmSchema },
      },
    },
    async (_request, reply) =>
      reply.type('application/json').header('cache-control', 'public, max-age=300').send(body),
  );
}

/** A quoted-string (RFC 9110 §5.6.4): `"` and `\` escaped. */
function quoted(v: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: refusing them is the point
  if (/[\u0000-\u001f\u007f]/.test(v))
    throw new TypeError('mercureLink: attributes cannot hold control characters');
  return `"${v.replace(/["\\]/g, '\\$&')}"`;
}

/**
 * The `Link` header value advertising a hub for a resource (draft §Hub Discovery). `lastEventId` is
 * the id of the last update published when the resource was generated (subscribers pass it back as
 * `last_event_id` and miss nothing); `type` and `contentType` describe the updates, when every update
 * for the resource has the same one.
 *
 * @example reply.header('link', mercureLink('https://hub.example.com/.well-known/mercure', { lastEventId: id }))
 */
export function mercureLink(
  hubUrl: string,
  attrs: { lastEventId?: string; type?: string; contentType?: string } = {},
): string {
  if (attrs.type === 'mercure') {
    throw new TypeError('mercureLink: the `mercure` type is reserved for the hub');
  }
  return hubLink(hubUrl, attrs);
}

/** mercureLink without the reserved-type rule: the hub advertises `mercure` on its own API. */
export function hubLink(
  hubUrl: string,
  attrs: { lastEventId?: string; type?: string; contentType?: string },
): string {
  if (/[<>\s]/.test(hubUrl)) {
    throw new TypeError('mercureLink: the hub URL must be a URL without <, > or spaces');
  }
  let link = `<${hubUrl}>; rel="mercure"`;
  if (attrs.lastEventId !== undefined) link += `; last-event-id=${quoted(attrs.lastEventId)}`;
  if (attrs.type !== undefined) link += `; type=${quoted(attrs.type)}`;
  if (attrs.contentType !== undefined) link += `; content-type=${quoted(attrs.contentType)}`;
  return link;
}
