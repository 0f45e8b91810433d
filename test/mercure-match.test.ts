import t from 'tap';
import {
  MAX_PATTERN_LENGTH,
  MatcherError,
  compileSelector,
  compileSelectors,
  selectsOneTopic,
} from '../src/mercure/match.ts';
import { isUriTemplate, uriTemplateMatcher } from '../src/mercure/uri-template.ts';

const HUB = 'https://hub.example/.well-known/mercure';
const url = (match: string) => compileSelector({ match, matchType: 'urlpattern' }, HUB);
const exact = (match: string) => compileSelector({ match, matchType: 'exact' }, HUB);
/** The 0.x selector (compatibility mode 8): the topic itself, or a URI Template. */
const topic = (match: string) => compileSelector({ match, matchType: 'topic' }, HUB);

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

// 0.x topic selectors: a valid RFC 6570 template matches what the reference hub's template regexp
// (yosida95/uritemplate) matches; a crafted one cannot backtrack (it runs on re2js).
t.test('templates match as on the reference hub', async (t) => {
  const cases: [string, string, boolean][] = [
    ['https://example.com/books/{id}', 'https://example.com/books/1', true],
    ['https://example.com/books/{id}', 'https://example.com/books/1/reviews', false],
    ['https://example.com/books/{id}', 'https://example.com/books/', true],
    ['https://example.com/books/{id}', 'https://example.com/books/a,b', true],
    ['https://example.com/books/{id}', 'https://example.com/books/caf%C3%A9', true],
    ['https://example.com/books/{id}', 'https://example.com/books/café', false],
    ['https://example.com/books/{id}', 'https://example.com/books/{id}', true],
    ['https://example.com/{+path}', 'https://example.com/a/b/c?d=e', true],
    ['https://example.com{/path*}', 'https://example.com/a/b/c', true],
    ['https://example.com{/path}', 'https://example.com/a/b', false],
    ['{scheme}://{+host}/demo/books/{id}.jsonld', 'https://example.com/demo/books/1.jsonld', true],
    [
      'https://example.com/users/foo/{?topic}',
      'https://example.com/users/foo/?topic=https%3A%2F%2Fe%2Fb%2F1',
      true,
    ],
    ['https://example.com/{?a,b}', 'https://example.com/?a=1&b=2', true],
    ['https://example.com/{#frag}', 'https://example.com/#a/b', true],
    ['https://example.com/{x:3}', 'https://example.com/12345', true],
    ['https://example.net/bar/{var}', 'https://example.net/foo/x', false],
    ['https://example.com/a{.ext}', 'https://example.com/a.json', true],
    ['https://example.com/a{;p}', 'https://example.com/a;p=1', true],
  ];
  for (const [template, candidate, want] of cases) {
    t.equal(topic(template)(candidate), want, `${template} vs ${candidate}`);
  }
});

t.test('a string that is not a template is compared exactly; `*` is every topic', async (t) => {
  for (const s of ['a b{x}', 'https://e/{id', 'https://e/{=x}', 'x}{y}', 'https://e/{a.b}', 'plain']) {
    t.notOk(isUriTemplate(s), `${s} is no template`);
    t.ok(topic(s)(s), `${s} matches itself`);
    t.notOk(topic(s)(`${s}x`));
  }
  t.ok(topic('*')('anything'));
  t.ok(
    selectsOneTopic({ match: 'https://e/a', matchType: 'topic' }),
    'an exact topic= reads the topic index',
  );
  t.notOk(selectsOneTopic({ match: 'https://e/{a}', matchType: 'topic' }));
  t.notOk(selectsOneTopic({ match: '*', matchType: 'topic' }));
  t.throws(() => topic(`https://e/{x}${'a'.repeat(1024)}`), MatcherError, 'a template over 1024 characters');
  t.ok(topic(`https://e/${'a'.repeat(2000)}`), 'a long plain string is only compared');
});

t.test('crafted templates run in linear time', async (t) => {
  const template = `https://e/${'{+a}'.repeat(250)}`;
  const m = uriTemplateMatcher(template);
  t.ok(m);
  const start = Date.now();
  for (let i = 0; i < 20; i++) m?.(`https://e/${'a/'.repeat(1000)} `);
  t.ok(Date.now() - start < 2000, `20 matches of a 2 KB topic took ${Date.now() - start} ms`);
  t.equal(uriTemplateMatcher(template), m, 'compiled once');
});
