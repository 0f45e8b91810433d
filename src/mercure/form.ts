/**
 * The one strict `application/x-www-form-urlencoded` parser of the hub, for publish bodies and
 * subscribe queries (draft-08: both MUST be parsed with the WHATWG algorithm). Only `&` separates
 * pairs, `+` is a space, a bare name is an empty value, and the first `=` splits name from value.
 * Unlike URLSearchParams, which puts U+FFFD where bytes are not UTF-8, this refuses them: the draft
 * says names and values MUST be UTF-8, and a silently repaired topic would be a different topic.
 * Pairs keep their order (the first `topic` is the canonical one).
 */
import { isUtf8 } from 'node:buffer';
import { ApiError } from '../errors.ts';

export interface FormPair {
  name: string;
  value: string;
}

const HEX = /^[0-9A-Fa-f]{2}$/;

/** Percent-decodes one name or value to bytes (a `%` not followed by two hex digits stays as is). */
function decodeBytes(s: string): Buffer {
  const plus = s.includes('+') ? s.replaceAll('+', ' ') : s;
  if (!plus.includes('%')) return Buffer.from(plus, 'utf8');
  const raw = Buffer.from(plus, 'utf8');
  const out = Buffer.alloc(raw.length);
  let n = 0;
  for (let i = 0; i < raw.length; i++) {
    const b = raw[i];
    if (b === 0x25 && i + 2 < raw.length && HEX.test(String.fromCharCode(raw[i + 1], raw[i + 2]))) {
      out[n++] = Number.parseInt(String.fromCharCode(raw[i + 1], raw[i + 2]), 16);
      i += 2;
    } else {
      out[n++] = b;
    }
  }
  return out.subarray(0, n);
}

function decode(s: string, where: string): string {
  const bytes = decodeBytes(s);
  if (!isUtf8(bytes)) {
    throw new ApiError(400, 'invalid_encoding', `${where} is not valid UTF-8 once percent-decoded`);
  }
  return bytes.toString('utf8');
}

/**
 * Parses form text (a body, or a URL's query without the `?`). `what` names the source in errors.
 *
 *     parseForm('topic=a&topic=b&private') // [{name:'topic',value:'a'},{name:'topic',value:'b'},{name:'private',value:''}]
 */
export function parseForm(text: string | Buffer, what: string): FormPair[] {
  let s: string;
  if (typeof text === 'string') s = text;
  else {
    // The body's raw bytes must be UTF-8 too (a form body is ASCII when correctly encoded).
    if (!isUtf8(text)) throw new ApiError(400, 'invalid_encoding', `the ${what} is not valid UTF-8`);
    s = text.toString('utf8');
  }
  const pairs: FormPair[] = [];
  for (const piece of s.split('&')) {
    if (piece === '') continue;
    const eq = piece.indexOf('=');
    const rawName = eq === -1 ? piece : piece.slice(0, eq);
    const rawValue = eq === -1 ? '' : piece.slice(eq + 1);
    const name = decode(rawName, `a field name of the ${what}`);
    pairs.push({ name, value: decode(rawValue, `the ${what} field ${JSON.stringify(name.slice(0, 40))}`) });
  }
  return pairs;
}

/** The query part of a request URL (after the first `?`, before any `#`), '' when there is none. */
export function rawQuery(url: string): string {
  const q = url.indexOf('?');
  if (q === -1) return '';
  const h = url.indexOf('#', q);
  return h === -1 ? url.slice(q + 1) : url.slice(q + 1, h);
}

// C0, DEL, C1 and Unicode format characters (Cf): refused in topics, ids, types and matchers.
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
const FORBIDDEN = /[\u0000-\u001f\u007f-\u009f\p{Cf}]/u;

/** True when `s` holds a control (C0, DEL, C1) or format (Cf) character. */
export function hasForbiddenChars(s: string): boolean {
  return FORBIDDEN.test(s);
}
