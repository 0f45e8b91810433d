// CI: the build serves. Runs `node dist/src/main.js` (after `npm run build`) on a fresh database of
// the server at $1 (created and dropped here), waits for /healthz, publishes one event and reads it
// back, then stops the server with SIGTERM and expects a clean exit. The build reads its SQL
// functions and migrations from dist/, so a file the build leaves out fails here. Exits non-zero
// with the reason on any failure; every wait is bounded.
import { spawn } from 'node:child_process';
import pg from 'pg';

const admin = process.argv[2];
if (!admin) {
  console.error('usage: node .ci/serve-build.mjs postgres://…/postgres');
  process.exit(2);
}
const t0 = Date.now();
const dbName = `cf_build_${process.pid}`;
const port = 58000 + (process.pid % 1000);
const base = `http://127.0.0.1:${port}`;

async function sql(text) {
  const c = new pg.Client({ connectionString: admin });
  await c.connect();
  try {
    await c.query(text);
  } finally {
    await c.end();
  }
}

async function until(what, ms, probe) {
  const end = Date.now() + ms;
  for (;;) {
    try {
      const v = await probe();
      if (v) return v;
    } catch {}
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

const url = new URL(admin);
url.pathname = `/${dbName}`;
await sql(`create database ${dbName}`);
const child = spawn(process.execPath, ['dist/src/main.js'], {
  env: { ...process.env, DATABASE_URL: url.href, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'warn' },
  stdio: ['ignore', 'inherit', 'inherit'],
});
const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
let failure;
try {
  await until('/healthz', 30_000, async () => (await fetch(`${base}/healthz`)).ok);
  const published = await fetch(`${base}/v1/streams/build-check/events`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ type: 'checked', data: { ok: true } }),
  });
  if (published.status !== 201)
    throw new Error(`publish answered ${published.status}: ${await published.text()}`);
  const read = await until('the event in the stream', 10_000, async () => {
    const r = await fetch(`${base}/v1/streams/build-check/events?from=earliest`, {
      headers: { accept: 'application/json' },
    });
    const body = await r.json();
    return (body.events ?? []).length === 1 ? body.events[0] : undefined;
  });
  if (read.type !== 'checked' || read.data?.ok !== true) throw new Error(`read back ${JSON.stringify(read)}`);
  child.kill('SIGTERM');
  const { code, signal } = await Promise.race([
    exited,
    new Promise((_, reject) => setTimeout(() => reject(new Error('no exit 20 s after SIGTERM')), 20_000)),
  ]);
  if (code !== 0) throw new Error(`exited with ${code ?? signal} after SIGTERM`);
  console.log(
    `the build serves: node dist/src/main.js published and read an event, stopped cleanly (${Date.now() - t0} ms)`,
  );
} catch (err) {
  failure = err;
} finally {
  if (child.exitCode === null && child.signalCode === null) {
    child.kill('SIGKILL');
    await exited;
  }
  await sql(`drop database if exists ${dbName} with (force)`).catch(() => {});
}
if (failure) {
  console.error(`the build does not serve: ${failure.message}`);
  process.exit(1);
}
