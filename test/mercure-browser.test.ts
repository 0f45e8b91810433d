// A real browser's EventSource on the Mercure hub, and a publish by fetch with a form body.
import t from 'tap';
import { launchChromium } from './chromium.ts';
import { startTestServer, testDatabase, until } from './helpers.ts';

interface Seen {
  type: string;
  data: string;
  lastEventId: string;
}

t.test(
  'Chromium EventSource receives a fetch form publish, one message per update, fields intact',
  async (t) => {
    let server = await startTestServer(t, await testDatabase(t));
    const context = await launchChromium(t, { width: 800, height: 600 });
    const page = await context.newPage();
    await page.goto(`${server.url}/health`);
    await page.evaluate(() => {
      const w = window as unknown as { seen: Seen[]; es: EventSource };
      w.seen = [];
      const url = new URL('/.well-known/mercure', location.href);
      url.searchParams.append('match_urlpattern', '/books/:id');
      w.es = new EventSource(url);
      const keep = (e: MessageEvent) =>
        w.seen.push({ type: e.type, data: e.data, lastEventId: e.lastEventId });
      w.es.onmessage = keep;
      w.es.addEventListener('update', keep as unknown as EventListener);
    });
    const seen = () => page.evaluate(() => (window as unknown as { seen: Seen[] }).seen);
    // Opened (the priming frame fires nothing), then published by fetch with a URLSearchParams body.
    await until(
      () => page.evaluate(() => (window as unknown as { es: EventSource }).es.readyState === 1),
      10000,
      'open',
    );
    const ids = await page.evaluate(async () => {
      const send = async (fields: [string, string][]) => {
        const res = await fetch('/.well-known/mercure', {
          method: 'POST',
          body: new URLSearchParams(fields),
        });
        return `${res.status} ${await res.text()}`;
      };
      return [
        await send([
          ['topic', '/books/1'],
          ['data', 'a\nevent: x\nid: y'],
          ['type', 'update'],
          ['id', 'book-1'],
        ]),
        await send([['topic', '/books/2']]),
        await send([
          ['topic', '/authors/1'],
          ['data', 'not matched'],
        ]),
      ];
    });
    t.same(ids.slice(0, 1), ['200 book-1']);
    await until(async () => (await seen()).length >= 2, 10000, 'two messages in the browser');
    const got = await seen();
    t.same(
      got[0],
      { type: 'update', data: 'a\nevent: x\nid: y', lastEventId: 'book-1' },
      'no field injection',
    );
    t.same([got[1].type, got[1].data], ['message', ''], 'an update without data still fires');
    t.equal(got.length, 2, 'the unmatched topic was not delivered');

    // A restart: EventSource reconnects with Last-Event-ID by itself and misses nothing.
    const port = Number(new URL(server.url).port);
    const dbUrl = server.databaseUrl;
    await server.close();
    server = await startTestServer(t, dbUrl, { port });
    const res = await fetch(`${server.url}/.well-known/mercure`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'topic=%2Fbooks%2F3&data=after',
    });
    t.equal(res.status, 200);
    await until(async () => (await seen()).length >= 3, 20000, 'the update published after the restart');
    t.same(
      (await seen()).map((m) => m.data),
      ['a\nevent: x\nid: y', '', 'after'],
      'resumed after the restart: no gap, no duplicate',
    );
  },
);
