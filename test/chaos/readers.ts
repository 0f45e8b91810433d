/**
 * The chaos checker's SSE readers (test/chaos/checker.ts), its outage probes, and the tally of how
 * their requests were answered.
 *
 * Two kinds of reader, each disconnecting at random (200 ms – 4 s; not while draining) and resuming
 * on any replica:
 * - fetch readers: half from `earliest`, half live, a few over several streams on one connection;
 *   each resumes with the last id it got, the primed id when it got no event yet.
 * - EventSource readers: a real `eventsource` client (what browsers do) from `earliest`. Its own
 *   reconnect logic resumes it: a cut ends the response body as a dropped connection would, and it
 *   reconnects after the server's `retry:` with `Last-Event-ID`, to a replica its fetch picks. They
 *   start from `earliest`: a live one cut before its primer arrived would reconnect live again and
 *   rightly miss what came between, which the checker cannot tell from a loss (the live fetch
 *   readers know their first primed id; `eventsource` takes the primer's id too, its `data:` line
 *   is there for that: src/http/sse.ts primerFrame).
 *
 * Every (re)connect's answer is tallied. An SSE request is answered 200 for every transient
 * condition (docs/streams.md "SSE through a database outage"): an EventSource that gets anything
 * else never reconnects. The deliberate refusals cannot happen here, so every other status is a
 * failure: no cursor is malformed (400: the readers send only ids the servers gave them, the probes
 * a well-formed one), no token is asked for or refused (no auth is configured, so neither 401/403
 * nor MAX_SSE_PER_TOKEN's 429), every request accepts text/event-stream (so no 406), and
 * MAX_SSE_CONNECTIONS (20,000, 503) is far above the readers. What is not an HTTP answer is counted
 * apart: a connection refused (a killed replica not yet back), a connection cut before the headers
 * (a replica killed while the request waited), and a reader that left before its answer came.
 */
import { EventSource, type FetchLikeResponse } from 'eventsource';
import { isPrimer, parseSse, splitEventId, textChunks } from '../../src/client/sse.ts';
import { formatCursor, parseCursor } from '../../src/feed/cursor.ts';

export interface Reader {
  n: number;
  kind: 'fetch' | 'eventsource';
  streams: string[];
  mode: 'earliest' | 'live';
  /** Expectations start after this cursor (START for earliest; the first primed id for live). */
  startAfter: string | undefined;
  cursor: string | undefined;
  received: { id: string; key: string }[];
  connects: number;
  errors: number;
  /** An EventSource that failed its connection (a non-200) and, as browsers do, stopped for good. */
  gaveUp?: boolean;
}

/** The checker's seeded choices (its rng). */
interface Choices {
  int(lo: number, hi: number): number;
  pick<T>(xs: readonly T[]): T;
}

/** What a reader needs from the run. */
export interface ReaderRun {
  services: readonly { url: string }[];
  tally: SseTally;
  /** The run is over: stop now. */
  stopped(): boolean;
  /** The writers are done: no more random disconnects, only catching up. */
  draining(): boolean;
  /** The reader got everything it is expected to get (known once the writers are done). */
  caughtUp(rd: Reader): boolean;
  /** The reader stops: caught up, or an EventSource that gave up. */
  done(rd: Reader): void;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** A cursor without the feed's tag: the events and the writers' answers carry it, the truth is read
 * from the table without it; positions are what is compared. */
export function position(cursor: string): string {
  const c = parseCursor(cursor);
  return c === undefined ? cursor : formatCursor(c);
}

/** `n` readers over `streams`: readers 4, 14, 24, ... are EventSources (from `earliest`), readers 9,
 * 19, 29, ... read several streams. */
export function makeReaders(n: number, streams: readonly string[], r: Choices): Reader[] {
  return Array.from({ length: n }, (_, i) => {
    const multi = i % 10 === 9;
    const first = r.pick(streams);
    const rs = multi ? [...new Set([first, r.pick(streams), r.pick(streams)])] : [first];
    const earliest = i % 2 === 0;
    return {
      n: i,
      kind: i % 10 === 4 ? 'eventsource' : 'fetch',
      streams: rs,
      mode: earliest ? 'earliest' : 'live',
      startAfter: earliest ? '0-0' : undefined,
      cursor: undefined,
      received: [],
      connects: 0,
      errors: 0,
    };
  });
}

export function runReader(rd: Reader, rr: Choices, run: ReaderRun): Promise<void> {
  return rd.kind === 'eventsource' ? eventSourceReader(rd, rr, run) : fetchReader(rd, rr, run);
}

// ---------------------------------------------------------------------------------------------
// The tally of answers.

export interface SseTally {
  t0: number;
  connects: number;
  ok: number;
  /** status → how many SSE requests were answered with it (200 aside). */
  other: Map<number, number>;
  refused: number;
  cutBeforeAnswer: number;
  leftBeforeAnswer: number;
  /** Of the connects: outage probes. */
  probes: number;
  /** The first non-200, for the verdict. */
  firstOther?: string;
}

export function newTally(t0: number): SseTally {
  return {
    t0,
    connects: 0,
    ok: 0,
    other: new Map(),
    refused: 0,
    cutBeforeAnswer: 0,
    leftBeforeAnswer: 0,
    probes: 0,
  };
}

/** An SSE request, its answer or its failure tallied. */
async function sseFetch(tally: SseTally, url: URL | string, init: RequestInit): Promise<Response> {
  tally.connects++;
  let res: Response;
  try {
    res = await fetch(url, init);
  } catch (err) {
    if (init.signal?.aborted) tally.leftBeforeAnswer++;
    else if ((err as { cause?: { code?: string } }).cause?.code === 'ECONNREFUSED') tally.refused++;
    else tally.cutBeforeAnswer++;
    throw err;
  }
  if (res.status === 200) tally.ok++;
  else {
    tally.other.set(res.status, (tally.other.get(res.status) ?? 0) + 1);
    if (tally.firstOther === undefined) {
      const body = await res
        .clone()
        .text()
        .catch(() => '');
      const at = ((Date.now() - tally.t0) / 1000).toFixed(1);
      tally.firstOther = `${res.status} at ${at}s to GET ${new URL(url).pathname}: ${body.slice(0, 200)}`;
    }
  }
  return res;
}

/** The summary: "SSE connects N: N answered 200, non-200 none|{503: 2}, ...". */
export function tallyLine(t: SseTally): string {
  const other = t.other.size === 0 ? 'none' : [...t.other].map(([s, n]) => `${s}×${n}`).join(' ');
  return (
    `SSE connects ${t.connects} (${t.probes} outage probes): ${t.ok} answered 200, non-200 ${other}, no answer: ${t.refused} refused, ` +
    `${t.cutBeforeAnswer} cut, ${t.leftBeforeAnswer} left by the reader`
  );
}

// ---------------------------------------------------------------------------------------------
// The outage probe.

/** Past everything any feed here commits: checking it needs the database (src/feed/history.ts). */
const AHEAD = '1000000000000-1000000000000';
/** A stream no writer writes: after its `reset` the probe has nothing to catch up. */
const PROBE_STREAM = 'chaos-probe';
const PROBE_MS = 20_000;

/**
 * An SSE request sent while the database (or the pooler) is down, whose start only the database can
 * decide. The readers' reconnects rarely need it in a short outage (a cursor the process already
 * knows passes without it), so without the probes a 503 there would rarely be seen. It must be
 * answered 200 at once (tallied like every connect) and say `reset` in-band once the database is
 * back. Resolves to what went wrong, if anything; a refused or cut connection (a killed replica) is
 * not its failure.
 */
export async function outageProbe(
  run: ReaderRun,
  svc: { url: string },
  during: string,
): Promise<string | undefined> {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), PROBE_MS);
  const headers = { accept: 'text/event-stream', 'last-event-id': AHEAD };
  run.tally.probes++;
  try {
    const res = await sseFetch(run.tally, `${svc.url}/v1/streams/${PROBE_STREAM}/events`, {
      headers,
      signal: abort.signal,
    });
    if (res.status !== 200 || !res.body) {
      await res.arrayBuffer().catch(() => {});
      return undefined; // the tally fails the run
    }
    for await (const m of parseSse(textChunks(res.body))) {
      if (m.event === 'reset') return undefined;
      if (m.data !== undefined && !isPrimer(m))
        return `a probe during ${during} got \`${m.event}\` before its reset`;
    }
    return `a probe during ${during}: the stream ended without its reset`;
  } catch {
    if (abort.signal.aborted) return `a probe during ${during}: no reset within ${PROBE_MS / 1000} s`;
    return undefined;
  } finally {
    clearTimeout(timer);
  }
}

// ---------------------------------------------------------------------------------------------
// The readers.

async function fetchReader(rd: Reader, rr: Choices, run: ReaderRun): Promise<void> {
  while (!run.stopped()) {
    if (run.caughtUp(rd)) return run.done(rd);
    const svc = rr.pick(run.services);
    const qs =
      rd.streams.length === 1 ? '' : `?${rd.streams.map((s) => `stream=${encodeURIComponent(s)}`).join('&')}`;
    const base =
      rd.streams.length === 1 ? `${svc.url}/v1/streams/${rd.streams[0]}/events` : `${svc.url}/v1/events${qs}`;
    const headers: Record<string, string> = { accept: 'text/event-stream' };
    let url = base;
    if (rd.cursor !== undefined) headers['last-event-id'] = rd.cursor;
    else if (rd.mode === 'earliest') url += `${qs === '' ? '?' : '&'}from=earliest`;
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), run.draining() ? 60_000 : rr.int(200, 4000));
    const poll = setInterval(() => {
      if (run.stopped() || run.caughtUp(rd)) abort.abort();
    }, 100);
    try {
      rd.connects++;
      const res = await sseFetch(run.tally, url, { headers, signal: abort.signal });
      if (res.status !== 200 || !res.body) {
        await res.arrayBuffer().catch(() => {});
        rd.errors++;
      } else {
        for await (const m of parseSse(textChunks(res.body))) {
          if (m.data === undefined || isPrimer(m)) {
            // The primed id: where a live reader's expectations begin.
            if (isPrimer(m) && rd.cursor === undefined) {
              rd.cursor = m.id;
              if (rd.startAfter === undefined && m.id !== undefined) rd.startAfter = position(m.id);
            }
            continue;
          }
          if (m.event === 'unavailable') continue;
          take(rd, m.id ?? '', m.data);
        }
      }
    } catch {
      if (!abort.signal.aborted) rd.errors++;
    } finally {
      clearTimeout(timer);
      clearInterval(poll);
    }
    await sleep(rr.int(10, 300));
  }
}

/** An event received: a reader of several streams gets ids naming the stream after the cursor. */
function take(rd: Reader, eventId: string, data: string): void {
  const id = splitEventId(eventId).cursor;
  let key = '?';
  try {
    key = (JSON.parse(data) as { k: string }).k;
  } catch {
    // kept as '?': reported as a divergence
  }
  rd.received.push({ id: position(id), key });
  rd.cursor = id;
}

/** The event types the writers use (EventSource has no listener for every type). A `reset` never
 * should come: taken as an event, it is reported as a divergence. */
const TYPES = ['message', 'sql', 'held', 'reset'];

async function eventSourceReader(rd: Reader, rr: Choices, run: ReaderRun): Promise<void> {
  const first = new URL(`${run.services[0].url}/v1/streams/${rd.streams[0]}/events?from=earliest`);
  // Every (re)connect: a replica at random (a load balancer's choice), the answer tallied, and the
  // body ended at a random moment (a dropped connection) so that EventSource reconnects by itself.
  const fetchVia = async (url: string | URL, init: RequestInit): Promise<FetchLikeResponse> => {
    const to = new URL(url);
    to.host = new URL(rr.pick(run.services).url).host;
    rd.connects++;
    const res = await sseFetch(run.tally, to, init).catch((err: Error) => {
      rd.errors++;
      throw err;
    });
    if (res.status !== 200 || !res.body || run.draining()) return res;
    const { url: at, status, redirected, headers } = res;
    return { body: cutAfter(res.body, rr.int(200, 4000)), url: at, status, redirected, headers };
  };
  const es = new EventSource(first, { fetch: fetchVia });
  for (const type of TYPES) es.addEventListener(type, (m) => take(rd, m.lastEventId, m.data));
  es.onerror = () => {
    if (es.readyState === EventSource.CLOSED) rd.gaveUp = true;
  };
  try {
    while (!run.stopped() && !rd.gaveUp && !run.caughtUp(rd)) await sleep(100);
  } finally {
    es.close();
  }
  if (!run.stopped()) run.done(rd);
}

type Body = ReadableStream<Uint8Array<ArrayBuffer>>;

/** `body`, ended cleanly after `ms` (the response stream cancelled), or at its own end or error. */
function cutAfter(body: Body, ms: number): Body {
  const reader = body.getReader();
  let ended = false;
  let timer: NodeJS.Timeout | undefined;
  const end = (controller: ReadableStreamDefaultController<Uint8Array<ArrayBuffer>>, err?: unknown) => {
    if (ended) return;
    ended = true;
    clearTimeout(timer);
    if (err === undefined) controller.close();
    else controller.error(err);
  };
  return new ReadableStream({
    start(controller) {
      timer = setTimeout(() => {
        end(controller);
        reader.cancel().catch(() => {});
      }, ms);
    },
    async pull(controller) {
      try {
        const { done, value } = await reader.read();
        if (ended) return;
        if (done) end(controller);
        else controller.enqueue(value);
      } catch (err) {
        end(controller, err);
      }
    },
    cancel() {
      ended = true;
      clearTimeout(timer);
      return reader.cancel();
    },
  });
}
