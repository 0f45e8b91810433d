// What every scenario gets: options, the running systems, and where to put its results.
import type { ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { PeerStatus } from './peers.ts';
import type { Series, Table } from './report.ts';

export interface Options {
  quick: boolean;
  scenarios: number[];
  peers: string[];
  durationSec: number;
  warmupSec: number;
  conns: number[];
  /** Scenario 1: seconds of load on the fresh instance, reported per second (0 = off). */
  warmupCurveSec: number;
  batchSizes: number[];
  batchConns: number[];
  latencyRate: number;
  latencyStreams: number;
  latencySubs: number;
  latencyDurationSec: number;
  /** Scenario 3: rounds per system, alternating systems (each system's best round is compared). */
  latencyRounds: number;
  fanoutConns: number;
  fanoutStreams: number;
  fanoutRate: number;
  fanoutDurationSec: number;
  /** Scenario 7: SSE subscribers per API, and the publish rate of its fan-out runs. */
  mercureSubs: number;
  mercureRate: number;
  catchupEvents: number;
  preload: 'http' | 'sql';
  catchupTimeoutSec: number;
  analyzeAfterPreload: boolean;
  stallMs: number;
  db: string;
  port: number;
  naivePort: number;
  /** Scenario 4's raw node:http broadcaster peer. */
  rawPort: number;
  /** The no-database HTTP + SSE floor (scenarios 1 and 3). */
  floorPort: number;
  cpuProf: boolean;
  serverEnv: Record<string, string>;
  /** Where commitfeed's src/main.ts is run from. */
  serverDir: string;
  write: boolean;
}

export interface Server {
  name: string;
  port: number;
  cp: ChildProcess;
  log: string;
}

export interface Check {
  scenario: number;
  what: string;
  target: string;
  got: string;
  pass: boolean | undefined;
}

export interface Ctx {
  opts: Options;
  dbUrl: string;
  commitfeed: Server | undefined;
  naive: Server | undefined;
  /** The no-database HTTP + SSE floor (bench/peers/floor-server.ts), with `--peers floor`. */
  floor: Server | undefined;
  /** The same floor writing each event to the bench database first, with `--peers floor-commit`. */
  floorCommit: Server | undefined;
  nats: PeerStatus;
  redis: PeerStatus;
  tables: Table[];
  checks: Check[];
  plot: Series[];
  /** Problems seen in the systems under test (crashes, lost events), for the report. */
  problems: string[];
  /** Restarts commitfeed if it died; returns false if it cannot run. */
  ensureCommitfeed(scenario: number): Promise<boolean>;
  /** Stops commitfeed and starts a fresh process. */
  restartCommitfeed(scenario: number): Promise<boolean>;
}

export function log(msg: string): void {
  const t = new Date().toISOString().slice(11, 19);
  process.stderr.write(`[${t}] ${msg}\n`);
}

export const benchFile = (rel: string) => fileURLToPath(new URL(`../${rel}`, import.meta.url));
