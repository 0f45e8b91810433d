// Edges of the feed met by third-party clients and under load: the priming frame as the `eventsource`
// npm client reads it, `latest` and read-your-writes while the tailer is behind, and cursors below the
// trim mark served the same way by every instance.
import { EventSource } from 'eventsource';
import t from 'tap';
import { appendEvents } from '../src/feed/queries.ts';
import { publish, sleep, sqlClient, startTestServer, testDatabase, until } from './helpers.ts';

t.test(
  'priming: the eventsource npm client that drops before its first event resumes from its connect point',
  async (t) => {
    const dbUrl = await testDatabase(t);
    let server = await startTestServer(t, dbUrl);
    const port = Number(new URL(server.url).port);
    const db = sqlClient(t, dbUrl);
    await publish(server.url, 'p', { data: 'before connect' });

    const es = new EventSource(`${server.url}/v1/streams/p/events`);
    t.teardown(() => es.close());
    const got: { id: string; data: string }[] = [];
    es.onmessage = (m) => got.push({ id: m.lastEventId, data: m.data });
    await new Promise<void>((resolve, reject) => {
      es.onopen = () => resolve();
      es.onerror = (e) => reject(new Error(`eventsource failed to open: ${e.message}`));
    });
    es.onerror = null;
    await sleep(200); // the primer follows the headers at once; let it be parsed

    // The server goes away before any event; one commits meanwhile; the client reconnects by itself.
    await server.close();
    const [missed] = await appendEvents(db, [{ stream: 'p', type: null, key: null, data: '"while away"' }]);
    server = await startTestServer(t, dbUrl, { port });
    await until(() => got.length >= 1, 15000, 'the event committed while the client was away');
    await sleep(200);
    t.same(got, [{ id: missed.id, data: '"while away"' }], 'that event, once; the primer is no message');
  },
);
