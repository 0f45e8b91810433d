/**
 * RFC 6570 URI Templates as Mercure 0.x topic selectors (MERCURE_PROTOCOL_COMPATIBILITY=8): a
 * `topic=` value or a bare-string claim matches a topic equal to it, or, when it is a valid template,
 * a topic the template could expand to. The semantics are the reference hub's (the regular expression
 * yosida95/uritemplate builds for a template): each expression is an optional group; `{id}` stops at
 * `/`, `{+path}` and `{#frag}` cross it; `{/seg*}` repeats; a prefix `:n` is not enforced; a variable's
 * value is unreserved characters and `%XX` triplets, so raw non-ASCII never matches a variable. A
 * string that is not a valid template (by that parser's grammar) is compared exactly, as it was there.
 *
 * A template is client input run against every update a subscriber is offered, and the npm matchers
 * measured either backtrack (seconds on a 2 KB topic) or read templates loosely. So the expression is
 * written here and compiled by re2js, the linear-time engine match.ts runs URL Patterns on. Compiled
 * templates are kept (bounded: the map is emptied when full), since every client of an application
 * subscribes with the same few.
 */
import { RE2JS } from 're2js';

export type TemplateMatcher = (topic: string) => boolean;

/** A valid template the engine cannot compile within its limits (the ref hub's "too complex"). */
export class TemplateTooComplex extends Error {
  override name = 'TemplateTooComplex';
}

interface Expression {
  op: string;
  vars: { explode: boolean }[];
}
type Part = string | Expression;

const OPERATORS = '+#./;?&';
const RESERVED_OPERATORS = '=,!@|';
const HEX2 = /^[0-9A-Fa-f]{2}/;

/** RFC 6570 `literals`: what may stand outside an expression unencoded. */
function isLiteral(cp: number): boolean {
  if (cp < 0x80) return /[!#$&(-;=?-[\]_a-z~]/.test(String.fromCharCode(cp));
  if (cp < 0xa0 || (cp >= 0xd800 && cp <= 0xdfff) || (cp >= 0xfdd0 && cp <= 0xfdef)) return false;
  if (cp >= 0xfff0 && cp <= 0xffff) return false;
  if (cp >= 0xe0000 && cp < 0xe1000) return false;
  return (cp & 0xfffe) !== 0xfffe; // U+xFFFE and U+xFFFF of every plane are not characters
}

/** The parts of a template, or undefined when it is not one (the reference hub's grammar). */
function parse(s: string): Part[] | undefined {
  const parts: Part[] = [];
  let i = 0;
  while (i < s.length) {
    if (s[i] === '{') {
      const end = s.indexOf('}', i);
      const expr = end < 0 ? undefined : expression(s.slice(i + 1, end));
      if (expr === undefined) return undefined;
      parts.push(expr);
      i = end + 1;
      continue;
    }
    let lit = '';
    while (i < s.length && s[i] !== '{') {
      if (s[i] === '%') {
        if (!HEX2.test(s.slice(i + 1, i + 3))) return undefined;
        lit += s.slice(i, i + 3);
        i += 3;
        continue;
      }
      const cp = s.codePointAt(i) as number;
      if (!isLiteral(cp)) return undefined;
      lit += String.fromCodePoint(cp);
      i += cp > 0xffff ? 2 : 1;
    }
    parts.push(lit);
  }
  return parts;
}

/** One expression's inside (between `{` and `}`): an operator, then varspecs separated by `,`. */
function expression(body: string): Expression | undefined {
  if (body === '' || RESERVED_OPERATORS.includes(body[0])) return undefined;
  const op = OPERATORS.includes(body[0]) ? body[0] : '';
  const vars: { explode: boolean }[] = [];
  // A varname is varchars and %XX (the reference parser takes no `.` in it), then `*` or `:n`.
  const varspec = /^(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})+(\*|:[1-9][0-9]{0,3})?$/;
  for (const spec of body.slice(op.length).split(',')) {
    if (!varspec.test(spec)) return undefined;
    vars.push({ explode: spec.endsWith('*') });
  }
  return { op, vars };
}

const UNRESERVED = '\\-.0-9A-Z_a-z~';
const RESERVED = "!#$&'()*+,/:;=?@\\[\\]";

/** A run of a variable's characters: unreserved (+ reserved for `+` and `#`) or %XX. */
function valueClass(reserved: boolean, named: boolean): string {
  const extra = reserved ? RESERVED : named ? ',=' : ',';
  return `(?:[${UNRESERVED}${extra}]|%[0-9A-Fa-f]{2})*`;
}

/** The expression's pattern: optional as a whole, its first character and separator by operator. */
function expressionPattern({ op, vars }: Expression): string {
  const reserved = op === '+' || op === '#';
  const named = op === ';' || op === '?' || op === '&';
  const first = op === '+' || op === '' ? '' : op;
  const sep = op === '?' ? '&' : op === '' || reserved ? ',' : op;
  const explode = vars.some((v) => v.explode);
  let p = valueClass(reserved, named || vars[0].explode);
  if (vars.length > 1 || vars[0].explode) {
    const more = `(?:${RE2JS.quote(sep)}${valueClass(reserved, named || explode)})`;
    p += explode ? `${more}*` : `${more}{0,${vars.length - 1}}`;
  }
  return `(?:${RE2JS.quote(first)}${p})?`;
}

const MAX_CACHED = 1000;
/** null: not a template; an error: a template too complex (kept too, so a repeat costs no compile). */
const cache = new Map<string, TemplateMatcher | null | TemplateTooComplex>();

/**
 * The matcher of a valid template, or undefined when `s` is not one (then it is compared exactly).
 * Throws TemplateTooComplex when the engine refuses its expression.
 *
 *     uriTemplateMatcher('https://example.com/books/{id}')?.('https://example.com/books/1') // true
 */
export function uriTemplateMatcher(s: string): TemplateMatcher | undefined {
  if (!s.includes('{')) return undefined;
  let m = cache.get(s);
  if (m === undefined) {
    const parts = parse(s);
    m = parts === undefined ? null : compile(parts);
    if (cache.size >= MAX_CACHED) cache.clear();
    cache.set(s, m);
  }
  if (m instanceof TemplateTooComplex) throw m;
  return m ?? undefined;
}

function compile(parts: Part[]): TemplateMatcher | TemplateTooComplex {
  const source = parts.map((p) => (typeof p === 'string' ? RE2JS.quote(p) : expressionPattern(p))).join('');
  try {
    const re = RE2JS.compile(source);
    return (topic) => re.testExact(topic);
  } catch (err) {
    return new TemplateTooComplex(`URI template too complex to compile (${(err as Error).message})`);
  }
}

/** Is `s` a valid template with at least one expression (not an exact topic)? */
export function isUriTemplate(s: string): boolean {
  return s.includes('{') && parse(s) !== undefined;
}
