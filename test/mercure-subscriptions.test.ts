// Active subscriptions (draft-08 §Active Subscriptions): RFC 6570 topics, private `mercure` events
// written with their rows, the subscriptions API (grants on the relative path, Link with
// last-event-id, 404), and a dead instance's subscriptions ended by a survivor exactly once.
import Fastify from 'fastify';
import { CompiledQuery, type Kysely } from 'kysely';
import t, { type Test } from 'tap';
import { type Config, loadConfig } from '../src/config/config.ts';
import type { Database } from '../src/db/database.ts';
import { MercureAuthorizer } from '../src/mercure/authorize.ts';
import {
  ActiveSubscriptions,
  type MercureSubscriber,
  expandVar,
  newSubscriberId,
  mercureSubscriptionTopic,
} from '../src/mercure/active-subscriptions.ts';
import { activeSubscriptionRoutes } from '../src/mercure/active-subscription-routes.ts';
import { sqlClient, testDatabase } from './helpers.ts';
import { mercureConfigEnv, mercureToken } from './mercure-helpers.ts';

const HUB = '/.well-known/mercure';

interface Stored {
  topics: string[];
  private: boolean;
  type: string | null;
  doc: Record<string, unknown>;
}

/** Every subscription event stored so far, in feed order. */
async function events(db: Kysely<Database>): Promise<Stored[]> {
  const { rows } = await db.executeQuery<{
    type: string | null;
    data: { topics: string[]; private: boolean; data: string };
  }>(
    CompiledQuery.raw(
      `select type, data from commitfeed.feed where stream = 'mercure/updates' order by txid, id`,
    ),
  );
  return rows.map((r) => ({
    topics: r.data.topics,
    private: r.data.private,
    type: r.type,
    doc: JSON.parse(r.data.data),
  }));
}

async function setup(t: Test) {
  const db = sqlClient(t, await testDatabase(t));
  const config: Config = { ...loadConfig({}), ...mercureConfigEnv(), mercureSubscriptions: true };
  const log = Fastify().log;
  const authorizer = new MercureAuthorizer(config, log);
  const make = async () => {
    const s = new ActiveSubscriptions(db, authorizer, HUB, 60_000, log);
    await s.start();
    t.teardown(() => s.stop().catch(() => {}));
    return s;
  };
  return { db, config, authorizer, make };
}

t.test('RFC 6570 expansion: each value encoded exactly once', async (t) => {
  t.equal(expandVar('https://example.com/:selector'), 'https%3A%2F%2Fexample.com%2F%3Aselector');
  t.equal(expandVar("a!'()*b"), 'a%21%27%28%29%2Ab', "!'()* are encoded too");
  t.equal(expandVar('100%25 sure'), '100%2525%20sure', 'an existing % is encoded, not kept');
  t.equal(expandVar('é/~-._'), '%C3%A9%2F~-._');
  t.equal(
    mercureSubscriptionTopic(
      HUB,
      'urlpattern',
      'https://example.com/:selector',
      'urn:uuid:bb3de268-05b0-4c65-b44e-8f9acefc29d6',
    ),
    '/.well-known/mercure/subscriptions/urlpattern/https%3A%2F%2Fexample.com%2F%3Aselector/urn%3Auuid%3Abb3de268-05b0-4c65-b44e-8f9acefc29d6',
    'the draft’s example',
  );
  t.match(newSubscriberId(), /^urn:uuid:[0-9a-f-]{36}$/);
  t.not(newSubscriberId(), newSubscriberId());
});

t.test('opened and closed: rows and private mercure events in one transaction', async (t) => {
  const { db, authorizer, make } = await setup(t);
  const subs = await make();
  const grants = (
    (await authorizer.authenticate(
      {
        headers: {
          authorization: `Bearer ${await mercureToken({ subscribe: ['*'], payload: { tenant: 'acme' } })}`,
        },
      } as never,
      'subscribe',
    )) as { grants: MercureSubscriber['grants'] }
  ).grants;
  const conn: MercureSubscriber = {
    subscriber: newSubscriberId(),
    selectors: [
      { match: 'https://example.com/books/:id', matchType: 'urlpattern' },
      { match: 'https://example.com/books/:id', matchType: 'urlpattern' }, // the same matcher twice: one subscription
      { match: '/a b', matchType: 'exact' },
    ],
    grants,
  };
  await subs.opened(conn);
  const listed = await subs.list({}, 100);
  t.equal(listed.length, 2, 'one subscription per distinct matcher');
  const opened = await events(db);
  t.equal(opened.length, 2);
  for (const e of opened) {
    t.equal(e.type, 'mercure', 'SSE type mercure');
    t.equal(e.private, true, 'private');
    t.equal(e.doc.id, e.topics[0], 'the id is the topic');
    t.equal(e.doc.active, true);
    t.equal(e.doc.type, 'subscription');
    t.same(e.doc.payload, { tenant: 'acme' }, 'the payload of the first matching subscribe detail');
    t.equal(e.doc.subscriber, conn.subscriber);
  }
  t.equal(opened[1].topics[0], `${HUB}/subscriptions/exact/%2Fa%20b/${expandVar(conn.subscriber)}`);

  await subs.closed(conn);
  t.same(await subs.list({}, 100), [], 'closed: no longer listed');
  const all = await events(db);
  t.equal(all.length, 4);
  t.same(
    all.slice(2).map((e) => [e.topics[0], e.doc.active]),
    opened.map((e) => [e.topics[0], false]),
    'then active: false on the same topics',
  );
  t.notOk('payload' in (await subs.docs({ ...conn, grants: null }, true))[0], 'anonymous: no payload');
});

t.test(
  'a dead instance: a survivor ends its subscriptions once; a live one swept by mistake comes back',
  async (t) => {
    const { db, make } = await setup(t);
    const a = await make();
    const b = await make();
    const c = await make();
    const conn: MercureSubscriber = {
      subscriber: newSubscriberId(),
      selectors: [{ match: '/x', matchType: 'exact' }],
      grants: null,
    };
    await a.opened(conn);
    // A's lease runs out (it died: no renewal); nothing sleeps, the clock is moved in the database.
    await db.executeQuery(
      CompiledQuery.raw(
        `update commitfeed.mercure_instances set seen = now() - interval '2 minutes' where instance = $1`,
        [a.instance],
      ),
    );
    const [nb, nc] = await Promise.all([b.sweep(), c.sweep()]);
    t.equal(nb + nc, 1, 'exactly one survivor ends it');
    t.equal(await b.sweep(), 0);
    t.same(
      (await events(db)).map((e) => e.doc.active),
      [true, false],
      'active: false published once',
    );
    t.same(await b.list({}, 10), []);

    // A was alive after all (a long database outage): its next renewal announces it again.
    await a.beat();
    t.equal((await b.list({}, 10)).length, 1, 'listed again');
    t.same(
      (await events(db)).map((e) => e.doc.active),
      [true, false, true],
    );
    await a.stop();
    t.same(await b.list({}, 10), [], 'stop ends the instance’s subscriptions');
    t.same(
      (await events(db)).map((e) => e.doc.active),
      [true, false, true, false],
    );
  },
);

t.test('the subscriptions API', async (t) => {
  const { db, authorizer, make } = await setup(t);
  const subs = await make();
  const app = Fastify();
  t.teardown(() => app.close());
  const lastEventId = async () => {
    const { rows } = await db.executeQuery<{ mid: string }>(
      CompiledQuery.raw(
        `select mid from commitfeed.feed where stream = 'mercure/updates' order by txid desc, id desc limit 1`,
      ),
    );
    return rows[0]?.mid ?? 'earliest';
  };
  activeSubscriptionRoutes(app, { activeSubscriptions: subs, authorizer, lastEventId });
  const get = async (url: string, token?: string) => {
    const res = await app.inject({ url, headers: token ? { authorization: `Bearer ${token}` } : {} });
    // biome-ignore lint/suspicious/noExplicitAny: JSON read by the assertions
    const body: any = res.statusCode === 200 ? res.json() : res.body;
    return { status: res.statusCode, headers: res.headers, body };
  };
  const all = await mercureToken({ subscribe: ['*'] });

  const empty = await get(`${HUB}/subscriptions`, all);
  t.equal(empty.status, 200);
  t.match(empty.headers['content-type'], /^application\/json/);
  t.same(empty.body, { id: `${HUB}/subscriptions`, type: 'subscriptions', subscriptions: [] });
  t.equal(
    empty.headers.link,
    '<https://hub.example.com/.well-known/mercure>; rel="mercure"; last-event-id="earliest"; type="mercure"; content-type="application/json"',
  );

  const match = 'https://example.com/:selector';
  const conn: MercureSubscriber = {
    subscriber: newSubscriberId(),
    selectors: [{ match, matchType: 'urlpattern' }],
    grants: null,
  };
  await subs.opened(conn);
  const other: MercureSubscriber = {
    subscriber: newSubscriberId(),
    selectors: [{ match: '/other', matchType: 'exact' }],
    grants: null,
  };
  await subs.opened(other);

  const listed = await get(`${HUB}/subscriptions`, all);
  t.equal(listed.body.subscriptions.length, 2);
  const ids = (await events(db)).map((e) => String(e.doc.id));
  t.match(listed.headers.link, `last-event-id="`, 'the cursor');
  t.notMatch(listed.headers.link, 'earliest');

  const byMatcher = `${HUB}/subscriptions/urlpattern/${expandVar(match)}`;
  const one = await get(byMatcher, all);
  t.equal(one.status, 200);
  t.equal(one.body.id, byMatcher);
  t.same(
    one.body.subscriptions.map((s: { id: string }) => s.id),
    [ids[0]],
  );

  const single = await get(ids[0], all);
  t.equal(single.status, 200);
  t.same(single.body, {
    id: ids[0],
    type: 'subscription',
    match_type: 'urlpattern',
    match,
    subscriber: conn.subscriber,
    active: true,
  });
  t.equal(
    (await get(`${byMatcher}/${expandVar(newSubscriberId())}`, all)).status,
    404,
    'an unknown subscriber',
  );

  // Grants on the relative path, the same form as the event topics.
  const exact = await mercureToken({ subscribe: [byMatcher] });
  t.equal((await get(byMatcher, exact)).status, 200, 'an exact grant on the per-matcher collection');
  const denied = await get(`${HUB}/subscriptions`, exact);
  t.equal(denied.status, 403, 'not on the whole collection');
  t.match(denied.headers['www-authenticate'], 'error="insufficient_scope"');
  const pattern = await mercureToken({
    subscribe: [{ match: `${HUB}/subscriptions/urlpattern/*`, match_type: 'urlpattern' }],
  });
  t.equal((await get(ids[0], pattern)).status, 200, 'a relative URL pattern resolved against the hub URL');
  t.equal((await get(`${HUB}/subscriptions/exact/${expandVar('/other')}`, pattern)).status, 403);
  const none = await get(`${HUB}/subscriptions`);
  t.equal(none.status, 401, 'no token');
  t.match(none.headers['www-authenticate'], /^Bearer resource_metadata="[^"]+"$/);
});
