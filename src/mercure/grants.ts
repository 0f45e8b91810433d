/**
 * What a Mercure token grants: the selectors it may publish on and read private updates of, and the
 * payloads of its Mercure subscriptions. Read from `authorization_details` as draft-08 §Authorization
 * Details says: only entries of the Mercure type count, and one invalid Mercure entry rejects the
 * whole token (no partial grant). With MERCURE_PROTOCOL_COMPATIBILITY=8, a token of the 0.x keys
 * that carries no authorization details is read from its 0.x claim instead (legacyGrants), the way the
 * reference hub's compatibility mode reads it.
 */
import { TokenError } from '../auth/tokens.ts';
import { hasForbiddenChars } from './form.ts';
import { DETAIL_TYPE, type Role } from './issuers.ts';
import {
  MAX_PATTERN_LENGTH,
  MatcherError,
  type MatchType,
  type TopicSelector,
  compileSelector,
} from './match.ts';

/** Limits on a token's Mercure details (draft: over a limit is `invalid_token`). */
export const MAX_DETAILS = 32;
export const MAX_DETAIL_TOPICS = 100;

export interface MercureGrants {
  publish: TopicSelector[];
  /** In token order: the payload of the first entry matching a Mercure subscription is its payload. */
  subscribe: { selector: TopicSelector; payload?: unknown }[];
  /** A 0.x token's `mercure.payload`: the payload of a Mercure subscription whose entry has none. */
  fallbackPayload?: unknown;
  /** Seconds since the epoch (token expiry; the stream closes then). Infinity when nothing expires:
   * access control off (AUTH=off, no MERCURE_ISSUERS), or a 0.x token without `exp`. */
  exp: number;
  iss: string;
}

/** What a token's claims grant (its expiry and issuer come from the verification). */
export type TokenGrants = Omit<MercureGrants, 'exp' | 'iss'>;

class InvalidDetails extends TokenError {}

/** A token's Mercure grants from its `authorization_details`; throws InvalidDetails. */
export function parseGrants(
  payload: Record<string, unknown>,
  role: Role | undefined,
  hubUrl: string,
): TokenGrants {
  const grants: TokenGrants = { publish: [], subscribe: [] };
  const details = payload.authorization_details;
  if (details === undefined) return grants; // no Mercure detail: grants nothing
  if (!Array.isArray(details)) throw new InvalidDetails('authorization_details must be an array');
  let mercure = 0;
  for (const [i, d] of details.entries()) {
    if (typeof d !== 'object' || d === null || Array.isArray(d)) {
      throw new InvalidDetails(`authorization_details[${i}] must be an object`);
    }
    const detail = d as Record<string, unknown>;
    if (typeof detail.type !== 'string')
      throw new InvalidDetails(`authorization_details[${i}].type is missing`);
    if (detail.type !== DETAIL_TYPE) continue; // another API's detail: not ours to judge
    if (++mercure > MAX_DETAILS) throw new InvalidDetails(`more than ${MAX_DETAILS} Mercure details`);
    const { actions, topics, payload: extra } = detail;
    if (!Array.isArray(actions) || actions.length === 0 || !actions.every((a) => typeof a === 'string')) {
      throw new InvalidDetails(`authorization_details[${i}].actions must be a non-empty array of strings`);
    }
    if (!Array.isArray(topics) || topics.length === 0) {
      throw new InvalidDetails(`authorization_details[${i}].topics must be a non-empty array`);
    }
    if (topics.length > MAX_DETAIL_TOPICS) {
      throw new InvalidDetails(
        `authorization_details[${i}].topics has more than ${MAX_DETAIL_TOPICS} entries`,
      );
    }
    if (extra !== undefined && (typeof extra !== 'object' || extra === null || Array.isArray(extra))) {
      throw new InvalidDetails(`authorization_details[${i}].payload must be an object`);
    }
    const selectors = topics.map((t, j) => selectorOf(t, `authorization_details[${i}].topics[${j}]`, hubUrl));
    // Unknown actions grant nothing and are not an error; a key bound to one role grants only it.
    if (actions.includes('publish') && role !== 'subscribe') grants.publish.push(...selectors);
    if (actions.includes('subscribe') && role !== 'publish') {
      for (const selector of selectors) {
        grants.subscribe.push(extra === undefined ? { selector } : { selector, payload: extra });
      }
    }
  }
  return grants;
}

function selectorOf(raw: unknown, where: string, hubUrl: string): TopicSelector {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new InvalidDetails(`${where} must be an object {match, match_type?}`);
  }
  const { match, match_type: type = 'exact' } = raw as Record<string, unknown>;
  if (typeof match !== 'string') throw new InvalidDetails(`${where}.match must be a string`);
  if (match.length > MAX_PATTERN_LENGTH) {
    throw new InvalidDetails(`${where}.match is longer than ${MAX_PATTERN_LENGTH} characters`);
  }
  if (type !== 'exact' && type !== 'urlpattern') {
    throw new InvalidDetails(`${where}.match_type must be "exact" or "urlpattern"`);
  }
  return checked({ match, matchType: type as MatchType }, where, hubUrl);
}

/** The selector, once it compiled: an invalid or unsafe pattern rejects the token. */
function checked(selector: TopicSelector, where: string, hubUrl: string): TopicSelector {
  try {
    compileSelector(selector, hubUrl);
  } catch (err) {
    if (err instanceof MatcherError) throw new InvalidDetails(`${where}: ${err.message}`);
    throw err;
  }
  return selector;
}

/**
 * A verified token's grants: its authorization details, or, for a token of the 0.x keys (`legacy`)
 * that has none, its 0.x claim (the reference hub drops the 0.x claim of a token with details).
 */
export function grantsOf(
  payload: Record<string, unknown>,
  role: Role | undefined,
  hubUrl: string,
  legacy: boolean,
): TokenGrants {
  const details = payload.authorization_details;
  const none = details === undefined || (Array.isArray(details) && details.length === 0);
  return legacy && none ? legacyGrants(payload, role, hubUrl) : parseGrants(payload, role, hubUrl);
}

/** The namespaced 0.x claim, read instead of `mercure` when present (as the reference hub does). */
const NAMESPACED_CLAIM = 'https://mercure.rocks/';

/**
 * A 0.x token's grants (guide §Compatibility mode): the `https://mercure.rocks/` claim, else `mercure`,
 * with `publish` and `subscribe` lists of bare strings (0.x selectors: `*`, a topic or a URI Template)
 * or `{match, match_type?, payload?}` objects, and `payload`, the payload of every Mercure subscription
 * whose entry has none. Both lists are checked whatever the key's role; throws InvalidDetails.
 */
function legacyGrants(payload: Record<string, unknown>, role: Role | undefined, hubUrl: string): TokenGrants {
  const name = payload[NAMESPACED_CLAIM] !== undefined ? NAMESPACED_CLAIM : 'mercure';
  const claim = payload[name];
  if (claim === undefined || claim === null) return { publish: [], subscribe: [] };
  if (typeof claim !== 'object' || Array.isArray(claim)) {
    throw new InvalidDetails(`the "${name}" claim must be an object`);
  }
  const { publish, subscribe, payload: extra } = claim as Record<string, unknown>;
  const pub = legacyEntries(publish, `${name}.publish`, hubUrl);
  const sub = legacyEntries(subscribe, `${name}.subscribe`, hubUrl);
  return {
    publish: role !== 'subscribe' ? pub.map((e) => e.selector) : [],
    subscribe: role !== 'publish' ? sub : [],
    ...(role !== 'publish' && extra !== undefined && extra !== null ? { fallbackPayload: extra } : {}),
  };
}

function legacyEntries(raw: unknown, where: string, hubUrl: string): MercureGrants['subscribe'] {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw)) throw new InvalidDetails(`${where} must be an array`);
  if (raw.length > MAX_DETAIL_TOPICS)
    throw new InvalidDetails(`${where} has more than ${MAX_DETAIL_TOPICS} entries`);
  return raw.map((e: unknown, i) => {
    const at = `${where}[${i}]`;
    if (typeof e === 'string' && e.length > MAX_PATTERN_LENGTH) {
      throw new InvalidDetails(`${at} is longer than ${MAX_PATTERN_LENGTH} characters`);
    }
    const selector =
      typeof e === 'string'
        ? checked({ match: e, matchType: 'topic' }, at, hubUrl)
        : selectorOf(e, at, hubUrl);
    if (hasForbiddenChars(selector.match))
      throw new InvalidDetails(`${at} holds control or format characters`);
    const extra = typeof e === 'string' ? undefined : (e as Record<string, unknown>).payload;
    return extra === undefined || extra === null ? { selector } : { selector, payload: extra };
  });
}
