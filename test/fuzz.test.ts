// Property tests with a small seeded generator (FUZZ_SEED=<n> replays a run): the cursor parser
// never throws and round-trips exactly; an SSE frame is always one well-formed message whose
// fields hold no line break, whatever type (that passes validation) and data it carries.
import t from 'tap';
import { parseSse } from '../src/client/sse.ts';
import { type Cursor, compareCursors, formatCursor, parseCursor } from '../src/feed/cursor.ts';
import { sseFrame } from '../src/feed/frames.ts';
import type { FeedEvent } from '../src/feed/event.ts';
import { toEventInput } from '../src/feed/event.ts';
import { jsonDepth } from '../src/http/input.ts';

const SEED = Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31);
const RUNS = Number(process.env.FUZZ_RUNS ?? 3000);

/** mulberry32: small, fast, good enough to explore inputs. */
function rng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = a;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 2 ** 32;
  };
  const int = (n: number) => Math.floor(next() * n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)];
  // Characters that break parsers: line breaks of every kind, NUL and controls, separators,
  // surrogates (paired and lone), JSON and SSE syntax, digits and minus signs.
  const nasty = [
    '\n',
    '\r',
    '\r\n',
    '\u0000',
    '\u0007',
    '\u001f',
    '\u007f',
    '\u0085',
    '\u2028',
    '\u2029',
    '\ufeff',
    '\ud83d\ude00',
    '\ud800',
    '\udfff',
    ' ',
    '\t',
    ':',
    '"',
    '\\',
    '{',
    '}',
    '[',
    ']',
    ',',
    '-',
    '+',
    'data: ',
    'id: ',
    'event: ',
    'retry: ',
    '0',
    '9',
    'e',
    '.',
    'é',
    '中',
  ];
  const char = () => (next() < 0.5 ? pick(nasty) : String.fromCharCode(int(next() < 0.9 ? 128 : 65536)));
  const str = (max: number) => Array.from({ length: int(max + 1) }, char).join('');
  const digits = (max: number) => Array.from({ length: 1 + int(max) }, () => String(int(10))).join('');
  const json = (depth: number): unknown => {
    const k = int(depth > 0 ? 7 : 4);
    if (k === 0) return null;
    if (k === 1) return next() < 0.5;
    if (k === 2) return pick([0, -1, 1.5, 1e308, -1e-300, Number.MAX_SAFE_INTEGER, int(1e9)]);
    if (k === 3) return str(20);
    if (k === 4 || k === 5) return Array.from({ length: int(4) }, () => json(depth - 1));
    return Object.fromEntries(Array.from({ length: int(4) }, () => [str(6), json(depth - 1)]));
  };
  return { next, int, pick, str, digits, json };
}

t.test(`cursor parser (seed ${SEED})`, async (t) => {
  const r = rng(SEED);
  let parsed = 0;
  for (let i = 0; i < RUNS; i++) {
    // Mostly near-valid shapes, where parsers go wrong.
    const shapes = [
      () => r.str(30),
      () => `${r.digits(20)}-${r.digits(20)}`,
      () =>
        `${r.pick(['', ' ', '-', '+', '0', '\t', '\n'])}${r.digits(17)}${r.pick(['-', '--', '_', ''])}${r.digits(17)}${r.pick(['', ' ', '\u0000', 'x', '\r\n'])}`,
      () => `${r.int(2 ** 53)}-${r.int(2 ** 53)}`,
      () => `${r.pick(['1e3', 'Infinity', 'NaN', '0x10', '１２'])}-${r.digits(3)}`,
    ];
    const s = r.pick(shapes)();
    let c: Cursor | undefined;
    try {
      c = parseCursor(s);
    } catch (err) {
      t.fail(`parseCursor threw on ${JSON.stringify(s)}: ${(err as Error).message}`);
      continue;
    }
    if (c === undefined) continue;
    parsed++;
    const ok =
      Number.isSafeInteger(c.txid) &&
      Number.isSafeInteger(c.id) &&
      c.txid >= 0 &&
      c.id >= 0 &&
      /^\d{1,16}-\d{1,16}$/.test(s.trim()) &&
      compareCursors(parseCursor(formatCursor(c))!, c) === 0 &&
      formatCursor(c) ===
        s
          .trim()
          .replace(/^0+(?=\d)/, '')
          .replace(/-0+(?=\d)/, '-');
    if (!ok) t.fail(`bad parse of ${JSON.stringify(s)}: ${JSON.stringify(c)}`);
  }
  t.ok(
    parsed > RUNS / 10,
    `${parsed} of ${RUNS} inputs were valid cursors (the generator reaches both sides)`,
  );

  // Order: compareCursors is the tuple order, antisymmetric, and survives the text round trip.
  for (let i = 0; i < RUNS; i++) {
    const a = { txid: r.int(2 ** 40), id: r.int(4) };
    const b = { txid: r.next() < 0.5 ? a.txid : r.int(2 ** 40), id: r.int(4) };
    const want = a.txid !== b.txid ? Math.sign(a.txid - b.txid) : Math.sign(a.id - b.id);
    const got = Math.sign(compareCursors(parseCursor(formatCursor(a))!, parseCursor(formatCursor(b))!));
    if (got !== want || Math.sign(compareCursors(b, a)) !== -want) {
      t.fail(`order of ${formatCursor(a)} vs ${formatCursor(b)}`);
    }
  }
});

async function* once(chunks: string[]) {
  for (const c of chunks) yield c;
}

t.test(`SSE frames (seed ${SEED})`, async (t) => {
  const r = rng(SEED + 1);
  let typed = 0;
  let rejected = 0;
  for (let i = 0; i < RUNS; i++) {
    const value = r.json(4);
    // The type goes through the same validation as a publish; whatever it lets through must be safe.
    const type = r.next() < 0.2 ? undefined : r.str(12);
    let input: ReturnType<typeof toEventInput>;
    try {
      input = toEventInput('s', { data: value, type }, 1 << 20);
    } catch {
      rejected++;
      continue;
    }
    // Data as stored by the API (compact JSON), or by a raw SQL write (any insignificant whitespace).
    const spaced = JSON.stringify(value, null, r.pick([0, 2, '\t']));
    const data = r.next() < 0.5 ? input.data : spaced.replace(/\n/g, () => r.pick(['\n', '\r\n', '\r']));
    const cursor = `${r.int(2 ** 40)}-${r.int(2 ** 30)}`;
    const event = { ...input, data, cursor, ms: 0 } as unknown as FeedEvent;
    const frame = sseFrame(event);
    if (input.type !== null) typed++;

    const body = frame.slice(0, -2);
    const lines = body.split(/\r\n|\r|\n/);
    const shapeOk =
      frame.endsWith('\n\n') &&
      !body.includes('\n\n') &&
      lines.length === (input.type === null ? 2 : 3) &&
      lines[0] === `id: ${cursor}` &&
      lines[lines.length - 1].startsWith('data: ');
    if (!shapeOk) {
      t.fail(
        `malformed frame for type ${JSON.stringify(input.type)}: ${JSON.stringify(frame.slice(0, 200))}`,
      );
      continue;
    }
    // A conforming parser, fed the frame in random pieces, sees exactly this one event.
    const cuts = [...new Set(Array.from({ length: r.int(4) }, () => r.int(frame.length)))].sort(
      (x, y) => x - y,
    );
    const bounds = [0, ...cuts, frame.length];
    const pieces = bounds.slice(1).map((end, k) => frame.slice(bounds[k], end));
    const msgs = [];
    for await (const m of parseSse(once(pieces))) msgs.push(m);
    const m = msgs[0];
    const same =
      msgs.length === 1 &&
      m.id === cursor &&
      m.event === (input.type ?? undefined) &&
      JSON.stringify(JSON.parse(m.data!)) === JSON.stringify(value);
    if (!same)
      t.fail(`round trip failed for ${JSON.stringify({ type: input.type, data })}: ${JSON.stringify(msgs)}`);
  }
  t.ok(typed > RUNS / 10, `${typed} typed frames checked`);
  t.ok(rejected > RUNS / 10, `${rejected} unsafe types rejected by validation`);
});

t.test(`JSON depth scanner agrees with JSON.parse (seed ${SEED})`, async (t) => {
  const r = rng(SEED + 2);
  const depthOf = (v: unknown): number =>
    v !== null && typeof v === 'object'
      ? 1 + Math.max(0, ...Object.values(v as Record<string, unknown>).map(depthOf))
      : 0;
  for (let i = 0; i < RUNS; i++) {
    const v = r.json(6);
    const text = JSON.stringify(v);
    if (jsonDepth(text) !== depthOf(v)) t.fail(`depth of ${text}: ${jsonDepth(text)} != ${depthOf(v)}`);
  }
  t.pass('scanned');
});
