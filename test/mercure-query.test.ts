// QUERY /.well-known/mercure (draft-08 §Subscription): the matchers in a form body, taken together with
// the query's (one subscription per matcher of the union), `last_event_id` from the query before the
// body and the Last-Event-ID header before both, the same 400s as GET for body names and values, a
// body that is not a form refused, and CORS preflights allowing QUERY. Node's fetch is the client.
import t, { type Test } from 'tap';
import { parseSse, type SseMessage, textChunks } from '../src/client/sse.ts';
import { startTestServer, testDatabase, until } from './helpers.ts';
import { mercureConfigEnv, mercureToken } from './mercure-helpers.ts';

const HUB = '/.well-known/mercure';
const FORM = { 'content-type': 'application/x-www-form-urlencoded' };

/** A QUERY subscription read in the background; aborted at teardown. */
async function query(t: Test, target: string, body: string, headers: Record<string, string> = {}) {
  const abort = new AbortController();
  t.teardown(() => abort.abort());
  const res = await fetch(target, {
    method: 'QUERY',
    headers: { ...FORM, ...headers },
    body,
    signal: abort.signal,
  });
  const got: SseMessage[] = [];
  if (res.status === 200 && res.body) {
    void (async () => {
      for await (const m of parseSse(textChunks(res.body!))) if (m.data !== undefined) got.push(m);
    })().catch(() => {});
  }
  return { res, got, close: () => abort.abort() };
}

t.test('the body and the query are one set of parameters', async (t) => {
  const server = await startTestServer(
    t,
    await testDatabase(t),
    mercureConfigEnv({ mercureAnonymous: true, corsOrigins: ['https://app.example.com'] }),
  );
  const publisher = await mercureToken({ publish: ['*'] });
  const publish = async (topic: string, id?: string) => {
    const res = await fetch(`${server.url}${HUB}`, {
      method: 'POST',
      headers: { ...FORM, authorization: `Bearer ${publisher}` },
      body: new URLSearchParams([['topic', topic], ['data', topic], ...(id ? [['id', id]] : [])]).toString(),
    });
    t.equal(res.status, 200);
  };
  const live = await query(
    t,
    `${server.url}${HUB}?match=C`,
    new URLSearchParams([
      ['match', 'A'],
      ['match_urlpattern', '/b/:id'],
      ['match', 'C'],
    ]).toString(),
  );
  t.equal(live.res.status, 200);
  t.match(live.res.headers.get('content-type'), /^text\/event-stream/);
  for (const topic of ['A', '/b/1', 'C', 'D']) await publish(topic, `id-${topic}`);
  await publish('A', 'last');
  await until(() => live.got.length >= 4, 10000, 'four updates');
  t.same(
    live.got.map((m) => m.data),
    ['A', '/b/1', 'C', 'A'],
    'A and /b/1 from the body, C from both (once), not D',
  );

  // last_event_id: the query's before the body's, the header before both.
  const resumed = async (path: string, body: string, headers: Record<string, string> = {}) => {
    const r = await query(t, `${server.url}${HUB}${path}`, body, headers);
    r.close();
    return r.res.headers.get('mercure-last-event-id');
  };
  t.equal(await resumed('?last_event_id=id-A', 'match=*&last_event_id=id-C'), 'id-A');
  t.equal(await resumed('', 'match=*&last_event_id=id-C'), 'id-C', 'the body alone');
  t.equal(await resumed('?last_event_id=id-A', 'match=*', { 'last-event-id': 'id-D' }), 'id-D');

  const status = async (body: string | Blob, headers: Record<string, string> = FORM) => {
    const res = await fetch(`${server.url}${HUB}`, { method: 'QUERY', headers, body });
    if (res.status === 200) await res.body?.cancel();
    const code = res.status === 200 ? undefined : ((await res.json()) as { code: string }).code;
    return [res.status, code];
  };
  t.same(await status('match_regex=x'), [400, 'unsupported_matcher'], 'the match namespace, in the body too');
  t.same(await status('match=a%01b'), [400, 'invalid_matcher']);
  t.same(await status('match=%FF'), [400, 'invalid_encoding']);
  t.same(await status('topic=x'), [400, 'unsupported_matcher'], 'no topic= without compatibility');
  t.same(await status('last_event_id=x'), [400, 'missing_matcher']);
  t.same(await status('{"match":"x"}', { 'content-type': 'application/json' }), [
    415,
    'unsupported_media_type',
  ]);
  const untyped = new Blob(['match=x']); // a Blob without a type: fetch sends no Content-Type
  t.equal((await status(untyped, {}))[0], 400, 'a QUERY without Content-Type (RFC 10008)');

  const preflight = await fetch(`${server.url}${HUB}`, {
    method: 'OPTIONS',
    headers: {
      origin: 'https://app.example.com',
      'access-control-request-method': 'QUERY',
      'access-control-request-headers': 'content-type, last-event-id',
    },
  });
  t.equal(preflight.status, 204);
  t.match(preflight.headers.get('access-control-allow-methods'), /QUERY/);
});
