// Browsers on the hub, in Chromium (as test/mercure-browser.test.ts):
// - the official Mercure conformance suite (dunglas/mercure conformance-tests/mercure.spec.ts): its
//   eleven cases (raw strings, several topics and selectors, URIs, URI Templates, non-matching ones,
//   private updates an anonymous EventSource must not get; custom ids echoed), run as the suite runs
//   them (a page's EventSource, a fetch form publish with its own 0.x token), on a compatibility-mode
//   hub; and their 1.0 spelling (`match`, `match_urlpattern`, an at+jwt token) on a 1.0 hub and on the
//   compatibility-mode hub, which must not break 1.0 clients. Four cases go side by side at a time.
// - a 0.x application: `topic=` URI Templates with the `mercureAuthorization` cookie, resuming with
//   Last-Event-ID across a restart, the updates written meanwhile (from SQL) delivered exactly once.
import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import type { Page } from 'playwright-core';
import t, { type Test } from 'tap';
import type { Config } from '../src/config/config.ts';
import { launchChromium } from './chromium.ts';
import { sqlClient, startTestServer, testDatabase, until } from './helpers.ts';
import { legacyConfigEnv, legacyToken, mercureConfigEnv, mercureToken } from './mercure-helpers.ts';

/** The suite's own publisher token: HS256 with the 0.x default key, `mercure` publish and subscribe `*`. */
const SUITE_TOKEN =
  'eyJhbGciOiJIUzI1NiJ9.eyJtZXJjdXJlIjp7InB1Ymxpc2giOlsiKiJdLCJzdWJzY3JpYmUiOlsiKiJdfX0.bVXdlWXwfw9ySx7-iV5OpUSHo34RkjUdVzDLBcc6l_g';

interface Case {
  name: string;
  updateTopics: string[];
  selectors: [string, string][];
  mustBeReceived: boolean;
  private?: true;
}

/** The suite's dataset; `v1` gives the 1.0 spelling of its selectors (URI Templates as URL Patterns). */
function dataset(v1: boolean): Case[] {
  const r = Array.from({ length: 5 }, () => randomBytes(20).toString('hex'));
  const exact = (s: string): [string, string] => [v1 ? 'match' : 'topic', s];
  const template = (s: string): [string, string] =>
    v1 ? ['match_urlpattern', s.replace(/\{(\w+)\}/g, ':$1')] : ['topic', s];
  const c = (
    name: string,
    updateTopics: string[],
    selectors: [string, string][],
    mustBeReceived: boolean,
  ) => ({
    name,
    updateTopics,
    selectors,
    mustBeReceived,
  });
  return [
    c('raw string', [r[0]], [exact(r[0])], true),
    c('multiple topics', [randomBytes(20).toString('hex'), r[1]], [exact(r[1])], true),
    c('multiple topic selectors', [r[2]], [exact('foo'), exact(r[2])], true),
    c('URI', [`https://example.net/foo/${r[3]}`], [exact(`https://example.net/foo/${r[3]}`)], true),
    c(
      'URI template',
      [`https://example.net/foo/${r[4]}`],
      [template('https://example.net/foo/{random}')],
      true,
    ),
    c('nonmatching raw string', ['will-not-match}'], [exact('another-name')], false),
    c(
      'nonmatching URI',
      ['https://example.net/foo/will-not-match}'],
      [exact('https://example.net/foo/another-name')],
      false,
    ),
    c(
      'nonmatching URI template',
      ['https://example.net/foo/will-not-match}'],
      [template('https://example.net/bar/{var}')],
      false,
    ),
    { ...c('private raw string', [r[0]], [exact(r[0])], false), private: true },
    {
      ...c(
        'private URI',
        [`https://example.net/foo/${r[3]}`],
        [exact(`https://example.net/foo/${r[3]}`)],
        false,
      ),
      private: true,
    },
    {
      ...c(
        'private URI template',
        [`https://example.net/foo/${r[4]}`],
        [template('https://example.net/foo/{random}')],
        false,
      ),
      private: true,
    },
  ];
}

type Outcome = { name: string; received: boolean; status: number; contentType: string | null; body: string };

/**
 * Cases side by side in the page: an anonymous EventSource per case, opened; then the updates the
 * suite publishes (fetch, form body, custom id), the non-matching and private ones first; the cases
 * that must receive theirs wait for it, then the others get a grace period to prove they do not.
 */
function runSuite(page: Page, cases: Case[], token: string): Promise<Outcome[]> {
  return page.evaluate(
    async ({ cases, token }) => {
      const runs = cases.map((c) => {
        const url = new URL('/.well-known/mercure', location.href);
        for (const [name, value] of c.selectors) url.searchParams.append(name, value);
        const event = new URLSearchParams();
        for (const topic of c.updateTopics) event.append('topic', topic);
        event.set('id', `id-${JSON.stringify(c.updateTopics)}`);
        event.set('data', `data for\n\n        ${c.name}`);
        if (c.private) event.set('private', 'on');
        const es = new EventSource(url);
        let received = false;
        const got = new Promise<void>((resolve) => {
          es.onmessage = (e) => {
            if (e.type === 'message' && e.lastEventId === event.get('id') && e.data === event.get('data')) {
              received = true;
              resolve();
            }
          };
        });
        const opened = new Promise<void>((resolve) => {
          es.onopen = () => resolve();
        });
        return { c, es, event, got, opened, isReceived: () => received };
      });
      await Promise.all(runs.map((r) => r.opened));
      const order = [...runs].sort((a, b) => Number(a.c.mustBeReceived) - Number(b.c.mustBeReceived));
      const answers = new Map<string, { status: number; contentType: string | null; body: string }>();
      for (const r of order) {
        const resp = await fetch('/.well-known/mercure', {
          method: 'POST',
          headers: { Authorization: `Bearer ${token}` },
          body: r.event,
        });
        answers.set(r.c.name, {
          status: resp.status,
          contentType: resp.headers.get('Content-Type'),
          body: await resp.text(),
        });
      }
      const deadline = new Promise((resolve) => setTimeout(resolve, 5000));
      await Promise.race([Promise.all(runs.filter((r) => r.c.mustBeReceived).map((r) => r.got)), deadline]);
      await new Promise((resolve) => setTimeout(resolve, 200));
      for (const r of runs) r.es.close();
      return runs.map((r) => ({ name: r.c.name, received: r.isReceived(), ...answers.get(r.c.name)! }));
    },
    { cases, token },
  );
}

function check(t: Test, cases: Case[], outcomes: Outcome[]): void {
  for (const [i, o] of outcomes.entries()) {
    const c = cases[i];
    t.equal(o.received, c.mustBeReceived, `${c.name}: ${c.mustBeReceived ? 'received' : 'not received'}`);
    t.equal(o.status, 200, `${c.name}: published`);
    t.match(o.contentType, /^text\/plain(?:$|;.*)/);
    t.equal(o.body, `id-${JSON.stringify(c.updateTopics)}`, `${c.name}: the custom id`);
  }
}

t.test('the official conformance suite passes in compatibility mode and in 1.0 mode', async (t) => {
  const context = await launchChromium(t, { width: 800, height: 600 });
  const v1Token = () => mercureToken({ publish: ['*'] });
  const hubs: [string, Partial<Config>, [string, boolean, () => Promise<string>][]][] = [
    [
      'compatibility mode',
      legacyConfigEnv(),
      [
        ['as is (topic=, its 0.x token)', false, async () => SUITE_TOKEN],
        ['1.0 spelling', true, v1Token],
      ],
    ],
    ['1.0 mode', mercureConfigEnv(), [['1.0 spelling', true, v1Token]]],
  ];
  for (const [mode, config, suites] of hubs) {
    const server = await startTestServer(t, await testDatabase(t), { ...config, mercureAnonymous: true });
    const page = await context.newPage();
    await page.goto(`${server.url}/health`);
    for (const [name, v1, token] of suites) {
      const cases = dataset(v1);
      const tok = await token();
      // Four EventSources at a time: Chromium opens six HTTP/1.1 connections per origin, and the
      // publishes need one.
      const outcomes: Outcome[] = [];
      for (let i = 0; i < cases.length; i += 4) {
        outcomes.push(...(await runSuite(page, cases.slice(i, i + 4), tok)));
      }
      await t.test(`${name}, ${mode}`, async (t) => check(t, cases, outcomes));
    }
    await page.close();
    await server.close();
  }
});

t.test(
  'a 0.x browser app: topic= templates, the mercureAuthorization cookie, resume across a restart',
  async (t) => {
    const dbUrl = await testDatabase(t);
    let server = await startTestServer(t, dbUrl, legacyConfigEnv());
    const publisher = await legacyToken({ mercure: { publish: ['*'] } });
    const reader = await legacyToken({ mercure: { subscribe: ['https://example.com/books/{id}'] } });
    const context = await launchChromium(t, { width: 800, height: 600 });
    await context.addCookies([
      { name: 'mercureAuthorization', value: reader, url: server.url, httpOnly: true },
    ]);
    const page = await context.newPage();
    await page.goto(`${server.url}/health`);
    await page.evaluate(() => {
      const w = window as unknown as { seen: string[]; es: EventSource };
      w.seen = [];
      const url = new URL('/.well-known/mercure', location.href);
      url.searchParams.append('topic', 'https://example.com/books/{id}');
      url.searchParams.append('topic', 'https://example.com/{+path}');
      w.es = new EventSource(url, { withCredentials: true });
      w.es.onmessage = (e) => w.seen.push(`${e.lastEventId} ${e.data}`);
    });
    const seen = () => page.evaluate(() => (window as unknown as { seen: string[] }).seen);
    await until(
      () => page.evaluate(() => (window as unknown as { es: EventSource }).es.readyState === 1),
      10000,
      'open',
    );
    const post = async (topic: string, data: string, priv = false) => {
      const body = new URLSearchParams([
        ['topic', topic],
        ['data', data],
        ['id', data],
        ...(priv ? [['private', 'on']] : []),
      ]);
      const res = await fetch(`${server.url}/.well-known/mercure`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${publisher}`,
          'content-type': 'application/x-www-form-urlencoded',
        },
        body: body.toString(),
      });
      t.equal(res.status, 200);
    };
    await post('https://example.com/books/1', 'b1', true); // private, granted by the cookie's template
    await post('https://example.com/authors/8', 'a8', true); // private, not granted
    await post('https://example.com/authors/7', 'a7'); // {+path}
    await until(async () => (await seen()).length >= 2, 10000, 'two updates');

    // Down: the application writes two updates in its own transaction; up again on the same port.
    const port = Number(new URL(server.url).port);
    await server.close();
    const db = sqlClient(t, dbUrl);
    await sql`select commitfeed.mercure_publish('https://example.com/books/3'::text, data => 'b3', private => true, id => 'b3')`.execute(
      db,
    );
    await sql`select commitfeed.mercure_publish('https://example.com/x/y'::text, data => 'xy', id => 'xy')`.execute(
      db,
    );
    server = await startTestServer(t, dbUrl, { ...legacyConfigEnv(), port });
    await until(async () => (await seen()).length >= 4, 20000, 'the updates written while the hub was down');
    await post('https://example.com/books/4', 'b4', true);
    await until(async () => (await seen()).length >= 5, 10000, 'a live update after the reconnect');
    t.same(
      await seen(),
      ['b1 b1', 'a7 a7', 'b3 b3', 'xy xy', 'b4 b4'],
      'resumed from the last id: no gap, no duplicate',
    );
  },
);
