/**
 * Mercure topic selectors (draft-08 §Matcher Types): `exact` compares byte for byte, `urlpattern`
 * is a WHATWG URL Pattern resolved against the hub URL, and `*` matches every topic under any type.
 * `topic` is the 0.x selector, taken only with MERCURE_PROTOCOL_COMPATIBILITY=8 (a `topic=` query
 * value or a bare string in a 0.x claim): equal to the topic, or a URI Template it matches
 * (uri-template.ts).
 *
 * Node 20 has no URLPattern, so the polyfill (urlpattern-polyfill, pinned) provides the URL
 * semantics, but its regular expressions run on re2js, a linear-time engine: a pattern is user input
 * (a query parameter or a token grant), and native RegExp backtracks exponentially on patterns like
 * `/*-*-*-*-*-x` or `:x((?:a+)+b)` (measured 40 s and 5.5 s on one topic). The polyfill calls
 * `new RegExp` only synchronously inside its constructor, so the global is swapped for a re2js-backed
 * object for the duration of that call and restored in `finally`; nothing else can run meanwhile.
 * A pattern re2js cannot compile (lookaround) is refused with MatcherError, as the Go hub (RE2) does.
 * compileSelector checks at first use that the swap took (the polyfill really built its regexes
 * through it) and throws otherwise, so an upgrade of the polyfill that caches or inlines its regexes
 * cannot silently fall back to a backtracking engine.
 */
import { RE2JS } from 're2js';
import { URLPattern } from 'urlpattern-polyfill/urlpattern';
import { TemplateTooComplex, isUriTemplate, uriTemplateMatcher } from './uri-template.ts';

export type MatchType = 'exact' | 'urlpattern' | 'topic';
/** `match` `*` selects every topic, whatever the type. */
export interface TopicSelector {
  match: string;
  matchType: MatchType;
}
export type TopicMatcher = (topic: string) => boolean;

/** An invalid or unsupported pattern (the caller answers 400 on subscribe, 401 in a token). */
export class MatcherError extends Error {
  override name = 'MatcherError';
}
class EngineError extends Error {}

/** Longest pattern compiled, in UTF-16 units (checked before compiling: compile cost grows with length). */
export const MAX_PATTERN_LENGTH = 1024;

const everything: TopicMatcher = () => true;

// The polyfill only reads `exec` (and only for truthiness in `test`); the URLPattern objects never leave
// this module and only `test` is called on them, so `exec` runs re2js's DFA path (no capture groups),
// several times faster than a capturing exec.
const MATCHED = Object.freeze(['']) as unknown as RegExpExecArray;
let regexpCalls = 0;
function LinearRegExp(source: string, _flags?: string): Pick<RegExp, 'exec' | 'test'> {
  regexpCalls++;
  // `[^]` (any character) is a JavaScript-only spelling; RE2 writes it `[\s\S]`. Patterns are compiled
  // with the polyfill's `u` flag semantics (code points); re2js matches on code points too.
  const re = RE2JS.compile(source.replaceAll('[^]', '[\\s\\S]'));
  return {
    exec: (s: string) => (re.test(s) ? MATCHED : null),
    test: (s: string) => re.test(s),
  };
}

// An absolute pattern is compiled without a base: the draft asks for the hub URL as the base of
// *relative* patterns only, and the URL Pattern algorithm would otherwise prefix the hub's path to
// the opaque path of a pattern like `urn:isbn\\:*`, which could then never match.
function linearUrlPattern(pattern: string, base: string): URLPattern {
  const native = globalThis.RegExp;
  const before = regexpCalls;
  globalThis.RegExp = LinearRegExp as unknown as RegExpConstructor;
  let compiled: URLPattern;
  try {
    try {
      compiled = new URLPattern(pattern);
    } catch {
      compiled = new URLPattern(pattern, base);
    }
  } finally {
    globalThis.RegExp = native;
  }
  if (regexpCalls === before) {
    throw new EngineError(
      'urlpattern-polyfill did not build its regexes through the linear engine; refusing',
    );
  }
  return compiled;
}

/**
 * Compiles a selector once; the matcher is then called per topic.
 *
 *     const m = compileSelector({ match: '/books/:id', matchType: 'urlpattern' }, 'https://hub.example/.well-known/mercure');
 *     m('https://hub.example/books/1') // true
 */
export function compileSelector(sel: TopicSelector, hubUrl: string): TopicMatcher {
  if (sel.match === '*') return everything;
  if (sel.matchType === 'exact') {
    const want = sel.match;
    return (topic) => topic === want;
  }
  if (sel.matchType === 'topic') return legacySelector(sel.match);
  if (sel.matchType !== 'urlpattern')
    throw new MatcherError(`unknown match type ${JSON.stringify(sel.matchType)}`);
  if (sel.match.length > MAX_PATTERN_LENGTH) {
    throw new MatcherError(`a URL pattern is at most ${MAX_PATTERN_LENGTH} characters`);
  }
  let pattern: URLPattern;
  try {
    pattern = linearUrlPattern(sel.match, hubUrl);
  } catch (err) {
    if (err instanceof EngineError) throw err;
    throw new MatcherError(`invalid URL pattern: ${(err as Error).message}`);
  }
  return (topic) => {
    try {
      // The polyfill returns false for a topic it cannot parse as a URL (draft: it MUST NOT match);
      // the catch covers a throw from a future version the same way.
      // Only a relative topic takes the hub URL as base (an absolute one with an opaque path, `urn:…`,
      // would not match its own pattern otherwise).
      return URL.canParse(topic) ? pattern.test(topic) : pattern.test(topic, hubUrl);
    } catch {
      return false;
    }
  };
}

/** A 0.x selector: the topic itself, or a URI Template (a string that is not one is exact only). */
function legacySelector(want: string): TopicMatcher {
  if (want.length > MAX_PATTERN_LENGTH && isUriTemplate(want)) {
    throw new MatcherError(`a URI template is at most ${MAX_PATTERN_LENGTH} characters`);
  }
  let template: TopicMatcher | undefined;
  try {
    template = want.length > MAX_PATTERN_LENGTH ? undefined : uriTemplateMatcher(want);
  } catch (err) {
    if (err instanceof TemplateTooComplex) throw new MatcherError(err.message);
    throw err;
  }
  if (template === undefined) return (topic) => topic === want;
  return (topic) => topic === want || template(topic);
}

/** Does the selector match exactly one topic, its own text (so catch-up can read its topic index)? */
export function selectsOneTopic(sel: TopicSelector): boolean {
  if (sel.match === '*') return false;
  return sel.matchType === 'exact' || (sel.matchType === 'topic' && !isUriTemplate(sel.match));
}

/** Several selectors as one matcher: true when any matches. */
export function compileSelectors(sels: readonly TopicSelector[], hubUrl: string): TopicMatcher {
  const ms = sels.map((s) => compileSelector(s, hubUrl));
  if (ms.includes(everything)) return everything;
  if (ms.length === 1) return ms[0];
  return (topic) => ms.some((m) => m(topic));
}
