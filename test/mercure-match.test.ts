import t from 'tap';
import { MAX_PATTERN_LENGTH, compileSelector, compileSelectors } from '../src/mercure/match.ts';

const HUB = 'https://hub.example/.well-known/mercure';
const url = (match: string) => compileSelector({ match, matchType: 'urlpattern' }, HUB);
const exact = (match: string) => compileSelector({ match, matchType: 'exact' }, HUB);

t.test('exact compares byte for byte, without resolving or normalizing (M2)', async (t) => {
  t.ok(exact('https://example.com/books/1')('https://example.com/books/1'));
  t.notOk(exact('/foo')('https://hub.example/foo'), 'a relative value is not resolved');
  t.notOk(exact('https://example.com/Books')('https://example.com/books'), 'case-sensitive');
  t.notOk(exact('https://EXAMPLE.com/a')('https://example.com/a'), 'hosts are not normalized either');
  t.notOk(exact('caf\u00e9')('cafe\u0301'), 'no NFC');
  t.notOk(exact('a%41')('aA'), 'no percent decoding');
});

t.test('* matches every topic under either type (M1)', async (t) => {
  for (const m of [exact('*'), url('*')]) {
    t.ok(m('https://example.com/x'));
    t.ok(m('urn:x'));
    t.ok(m('not a url at all \u0000'));
  }
});

t.test(
  'URL patterns resolve against the hub URL; hosts are case-insensitive, paths are not (M3)',
  async (t) => {
    const cases: [string, string, boolean][] = [
      ['/books/:id', 'https://hub.example/books/1', true],
      ['/books/:id', '/books/1', true],
      ['/books/:id', 'books/1', false],
      ['/books/:id', 'https://other.example/books/1', false],
      ['/books/:id', 'https://hub.example/books/1/2', false],
      ['https://example.com/books/*', 'https://example.com/books/a/b', true],
      ['https://EXAMPLE.com/books/*', 'https://example.COM/books/x', true],
      ['https://example.com/Books/*', 'https://example.com/books/x', false],
      ['https://example.com/books{/:id}?', 'https://example.com/books', true],
      ['https://example.com/books{/:id}?', 'https://example.com/books/7', true],
      ['https://example.com/:id(\\d+)', 'https://example.com/12', true],
      ['https://example.com/:id(\\d+)', 'https://example.com/1a', false],
      ['https://example.com/*', 'https://example.com:99999/x', false],
      ['https://example.com/*', 'http://[::1/x', false],
      ['urn\\:isbn\\:*', 'urn:isbn:123', true],
      ['urn\\:isbn\\:*', 'urn:issn:123', false],
      ['urn\\:*', 'https://hub.example/x', false],
    ];
    for (const [pattern, topic, want] of cases) t.equal(url(pattern)(topic), want, `${pattern} ~ ${topic}`);
  },
);

t.test('a topic that cannot be parsed never matches (M3)', async (t) => {
  const m = url('https://example.com/*');
  t.notOk(m('http://exa mple.com/x'));
  t.notOk(m('https://[bad/x'));
});

t.test('invalid or unsupported patterns throw MatcherError', async (t) => {
  for (const bad of ['/a/:x((?=a)b)', '/a/(', '/:a/:a', 'https://example.com/:x((?<=a)b)']) {
    t.throws(() => url(bad), { name: 'MatcherError' }, bad);
  }
  t.throws(() => url('/' + 'a'.repeat(MAX_PATTERN_LENGTH)), { name: 'MatcherError' }, 'too long');
  t.throws(
    () => compileSelector({ match: '/x', matchType: 'regex' as 'exact' }, HUB),
    { name: 'MatcherError' },
    'unknown type',
  );
});

t.test('pathological patterns run in linear time (M4)', async (t) => {
  const cases: [string, string][] = [
    ['https://example.com/*-*-*-*-*-x', 'https://example.com/' + '-'.repeat(2000)],
    ['https://example.com/:x((?:a+)+b)', 'https://example.com/' + 'a'.repeat(2000)],
    ['https://example.com/:x((?:a|a)*b)', 'https://example.com/' + 'a'.repeat(2000)],
    ['/*/*/*/*/*/*/*/*/z', '/' + 'a/'.repeat(1000)],
  ];
  for (const [pattern, topic] of cases) {
    const m = url(pattern);
    const t0 = performance.now();
    t.notOk(m(topic), pattern);
    const ms = performance.now() - t0;
    t.ok(ms < 50, `${pattern} took ${ms.toFixed(1)} ms (< 50)`);
  }
});

t.test('several selectors: any match', async (t) => {
  const m = compileSelectors(
    [
      { match: 'urn:a', matchType: 'exact' },
      { match: '/b/:id', matchType: 'urlpattern' },
    ],
    HUB,
  );
  t.ok(m('urn:a'));
  t.ok(m('https://hub.example/b/1'));
  t.notOk(m('urn:b'));
});

t.test('the native RegExp is restored after a compile, even a failing one', async (t) => {
  const native = globalThis.RegExp;
  url('/x/:y');
  t.equal(globalThis.RegExp, native);
  t.throws(() => url('/a/:x((?=a)b)'));
  t.equal(globalThis.RegExp, native);
});
