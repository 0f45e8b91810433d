/**
 * Active subscriptions in the 0.x shape (MERCURE_PROTOCOL_COMPATIBILITY=8), for the Mercure
 * subscriptions made with `topic=` only; those made with `match` keep the 1.0 shape in both modes.
 * What 0.x clients read (draft-07 §Active Subscriptions): JSON-LD documents (`@context`,
 * `type: "Subscription"`, `topic`), on the topic `<hub path>/subscriptions/{topic}/{subscriber}`, each
 * value encoded as the reference hub encodes it (everything but `A-Z a-z 0-9 - . _ ~`, a space as
 * `+`), and events without an SSE event type (0.x clients listen with onmessage; 1.0's `mercure` type
 * would hide them). The 0.x subscriptions API answers `application/ld+json` with `lastEventID` in the
 * body; its routes are active-subscription-routes.ts's.
 */
import type { FastifyReply } from 'fastify';
import { ApiError } from '../errors.ts';

export const LEGACY_CONTEXT = 'https://mercure.rocks/';

/** A 0.x Mercure subscription's document, in its events and in the 0.x API. */
export interface LegacySubscriptionDoc {
  '@context': typeof LEGACY_CONTEXT;
  id: string;
  type: 'Subscription';
  subscriber: string;
  topic: string;
  active: boolean;
  payload?: unknown;
}

/** One value in a 0.x subscription topic (Go's url.QueryEscape, as the reference hub expands it). */
export function legacyEscape(value: string): string {
  return encodeURIComponent(value)
    .replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
    .replaceAll('%20', '+');
}

/** A path segment of the 0.x API back to its value (`+` is a space); undefined when malformed. */
export function legacyUnescape(segment: string): string | undefined {
  try {
    return decodeURIComponent(segment.replaceAll('+', ' '));
  } catch {
    return undefined;
  }
}

export function legacySubscriptionTopic(hubPath: string, topic: string, subscriber: string): string {
  return `${hubPath}/subscriptions/${legacyEscape(topic)}/${legacyEscape(subscriber)}`;
}

export function legacyDoc(
  hubPath: string,
  topic: string,
  subscriber: string,
  active: boolean,
  payload: unknown,
): LegacySubscriptionDoc {
  return {
    '@context': LEGACY_CONTEXT,
    id: legacySubscriptionTopic(hubPath, topic, subscriber),
    type: 'Subscription',
    subscriber,
    topic,
    active,
    ...(payload === undefined ? {} : { payload }),
  };
}

export function isLegacyDoc(doc: object): doc is LegacySubscriptionDoc {
  return '@context' in doc;
}

/**
 * A 0.x document as a collection lists it: without the `@context`, which the 0.x collection gives
 * once and the shared 1.0 collection does not use (the reference hub lists it so in both).
 */
export function legacyEntry(doc: LegacySubscriptionDoc): Omit<LegacySubscriptionDoc, '@context'> {
  const { '@context': _, ...entry } = doc;
  return entry;
}

/**
 * The 0.x API's answer (draft-07 §Subscription API): one document, or a collection whose entries
 * drop the `@context` their parent gives, each with `lastEventID`. The body is written here (not by
 * the route's 1.0 response schema, which would strip the 0.x fields).
 */
export function sendLegacy(
  reply: FastifyReply,
  answer: { id: string; lastEventId: string; docs: object[]; single: boolean },
): FastifyReply {
  const { id, lastEventId, docs, single } = answer;
  reply.type('application/ld+json');
  if (single) {
    if (docs.length === 0) throw new ApiError(404, 'not_found', 'no such active subscription');
    return reply.send(JSON.stringify({ ...docs[0], lastEventID: lastEventId }));
  }
  const subscriptions = docs.map((d) => legacyEntry(d as LegacySubscriptionDoc));
  return reply.send(
    JSON.stringify({
      '@context': LEGACY_CONTEXT,
      id,
      type: 'Subscriptions',
      lastEventID: lastEventId,
      subscriptions,
    }),
  );
}
