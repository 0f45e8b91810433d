// OpenAPI spec and docs page, the stream list endpoint and the live page: what users open first;
// and the Markdown docs: every API route documented, every page linked from a README that stays short.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { publish, startTestServer, testDatabase } from './helpers.ts';
import { mercureConfigEnv } from './mercure-helpers.ts';

interface Operation {
  summary?: string;
  tags?: string[];
  responses?: Record<string, { description?: string; content?: Record<string, unknown> }>;
  requestBody?: unknown;
  parameters?: { name: string; in: string }[];
}

t.test('the spec at /openapi.json documents every route from its schemas', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const res = await fetch(`${server.url}/openapi.json`);
  t.equal(res.status, 200);
  t.match(res.headers.get('content-type'), /application\/json/);
  const spec = (await res.json()) as {
    openapi: string;
    info: { title: string };
    paths: Record<string, Record<string, Operation>>;
  };
  t.match(spec.openapi, /^3\./);
  t.equal(spec.info.title, 'commitfeed');

  const documented = new Set<string>();
  const withoutErrors: string[] = [];
  for (const [path, ops] of Object.entries(spec.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      const name = `${method.toUpperCase()} ${path}`;
      documented.add(name);
      t.ok(op.summary, `${name} has a summary`);
      const codes = Object.keys(op.responses ?? {});
      t.ok(
        codes.some((c) => c.startsWith('2')),
        `${name} documents a success response`,
      );
      if (!codes.some((c) => /^[45]/.test(c))) withoutErrors.push(name);
    }
  }
  if (withoutErrors.length > 0) t.comment(`no error responses documented: ${withoutErrors.join(', ')}`);
  // The routes of this file's concern, each with its errors; routes added later show up by themselves
  // because the docs plugin is registered before every route.
  for (const r of [
    'POST /v1/streams/{stream}/events',
    'GET /v1/streams/{stream}/events',
    'GET /v1/events',
    'GET /v1/streams',
    'GET /healthz',
    'GET /readyz',
  ]) {
    t.ok(documented.has(r), `${r} is in the spec`);
    if (r !== 'GET /healthz') t.notOk(withoutErrors.includes(r), `${r} documents its errors`);
  }
  for (const hidden of ['GET /', 'GET /openapi.json', 'GET /docs']) {
    t.notOk(documented.has(hidden), `${hidden} is not part of the API spec`);
  }

  const publishOp = spec.paths['/v1/streams/{stream}/events'].post;
  t.ok(publishOp.requestBody, 'publish documents its body');
  t.same(Object.keys(publishOp.responses!).sort(), ['200', '201', '400', '413', '415', '500', '503']);
  const read = spec.paths['/v1/streams/{stream}/events'].get;
  t.ok(read.responses!['200'].content!['text/event-stream'], 'SSE is documented as a response type');
  t.ok(read.responses!['200'].content!['application/json'], 'JSON pages are documented too');
  t.same(read.parameters!.map((p) => `${p.in}:${p.name}`).sort(), [
    'path:stream',
    'query:after',
    'query:from',
    'query:limit',
    'query:wait',
  ]);
  const multi = spec.paths['/v1/events'].get;
  t.ok(
    multi.parameters!.some((p) => p.name === 'stream' && p.in === 'query'),
    'the multi-stream read documents its repeated stream parameter',
  );
});

t.test('the docs page loads', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const res = await fetch(`${server.url}/docs`);
  t.equal(res.status, 200);
  t.match(res.headers.get('content-type'), /text\/html/);
  t.match(await res.text(), /swagger-ui/i);
  const init = await fetch(`${server.url}/docs/static/swagger-initializer.js`);
  t.equal(init.status, 200, 'the UI assets are served');
  const json = await fetch(`${server.url}/docs/json`);
  t.equal(json.status, 200, 'the UI reads the same spec');
});

t.test('GET /v1/streams lists streams with recent activity', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const empty = await (await fetch(`${server.url}/v1/streams`)).json();
  t.same(empty, { streams: [], window: 10000, more: false }, 'an empty feed lists nothing');

  await publish(server.url, 'orders', [{ data: 1, type: 'created' }, { data: 2, type: 'paid' }, { data: 3 }]);
  await publish(server.url, 'audit', { data: 'x' });
  await publish(server.url, 'zeta', { data: 'z' });
  const res = await fetch(`${server.url}/v1/streams`);
  t.equal(res.status, 200);
  const body = (await res.json()) as {
    streams: { name: string; recent: number; lastMinute: number; lastEventAt: string; types: string[] }[];
    more: boolean;
  };
  t.same(
    body.streams.map((s) => [s.name, s.recent, s.lastMinute, s.types.sort()]),
    [
      ['audit', 1, 1, []],
      ['orders', 3, 3, ['created', 'paid']],
      ['zeta', 1, 1, []],
    ],
  );
  t.ok(Date.now() - Date.parse(body.streams[1].lastEventAt) < 60_000, 'lastEventAt is recent');
  t.equal(body.more, false);

  const limited = (await (await fetch(`${server.url}/v1/streams?limit=2`)).json()) as typeof body;
  t.same(
    limited.streams.map((s) => s.name),
    ['audit', 'orders'],
  );
  t.equal(limited.more, true, 'says when more streams exist');

  const bad = await fetch(`${server.url}/v1/streams?limit=0`);
  t.equal(bad.status, 400);
  t.equal(((await bad.json()) as { code: string }).code, 'invalid_request');
  const unknown = await fetch(`${server.url}/v1/streams?nope=1`);
  t.equal(((await unknown.json()) as { code: string }).code, 'unknown_parameter');
});

t.test('the live page is served at /', async (t) => {
  const server = await startTestServer(t, await testDatabase(t));
  const res = await fetch(`${server.url}/`);
  t.equal(res.status, 200);
  t.match(res.headers.get('content-type'), /text\/html/);
  const html = await res.text();
  t.match(html, /new EventSource\(/, 'tails with the native EventSource');
  t.match(html, /\/v1\/streams/, 'lists streams from the JSON endpoint');
});

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const MARKDOWN = [
  'README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];
const HIDDEN_ROUTES = ['GET /', 'GET /openapi.json', 'GET /docs'];
/** Markdown without fenced code blocks (examples are not links or route references). */
const prose = (file: string) => readFileSync(join(ROOT, file), 'utf8').replace(/^```[\s\S]*?^```/gm, '');

t.test('every route of the API spec is documented in docs/, and every documented route exists', async (t) => {
  // With every optional part on (the Mercure hub's metadata and subscriptions API).
  const server = await startTestServer(t, await testDatabase(t), {
    ...mercureConfigEnv(),
    mercureSubscriptions: true,
  });
  const spec = (await (await fetch(`${server.url}/openapi.json`)).json()) as {
    paths: Record<string, object>;
  };
  const routes = new Set<string>();
  for (const [path, ops] of Object.entries(spec.paths)) {
    for (const method of Object.keys(ops)) routes.add(`${method.toUpperCase()} ${path}`);
  }
  t.ok(routes.size >= 20, `the spec lists the API (${routes.size} routes)`);
  const documented = new Map<string, string>();
  for (const file of MARKDOWN.filter((f) => f.startsWith('docs/'))) {
    for (const m of prose(file).matchAll(/`(GET|POST|PUT|PATCH|DELETE|QUERY) (\/[^`\s?]*)`/g)) {
      documented.set(`${m[1]} ${m[2]}`, file);
    }
  }
  for (const r of routes) t.ok(documented.has(r), `${r} is documented in docs/ (as \`${r}\`)`);
  for (const [r, file] of documented) {
    t.ok(routes.has(r) || HIDDEN_ROUTES.includes(r), `${r} (${file}) is a route of the API`);
  }
});

// Links resolving, anchors included, are checked with every other pointer in test/pointers.test.ts.
t.test('every page of docs/ is reachable from the README', async (t) => {
  t.ok(MARKDOWN.length >= 9, `README and the docs pages (${MARKDOWN.join(', ')})`);
  const readme = prose('README.md');
  for (const file of MARKDOWN.filter((f) => f.startsWith('docs/'))) {
    t.ok(readme.includes(`](${file})`), `README links to ${file}`);
  }
});

t.test('the README stays a five-minute read with the two set-up commands', async (t) => {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const lines = readme.split('\n').length;
  t.ok(lines <= 130, `README.md is ${lines} lines (reference material belongs in docs/)`);
  t.match(readme, /^npm ci && npm start\b/m, 'the first command');
  t.match(readme, /^npm test\b/m, 'the second command');
  t.match(readme, /must be recreated/, 'says that databases from before the baseline must be recreated');
});
