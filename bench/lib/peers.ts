// Peers beside commitfeed: the floor (bench/peers/floor-server.ts, started here); NATS and Redis: is
// the peer reachable, what version, and the JetStream stream / Redis keys the bench writes (made
// before a run, removed after it).
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { connect, RetentionPolicy, StorageType } from 'nats';
import { benchFile, type Server } from './context.ts';
import { spawnNode, waitForHttp } from './proc.ts';
import { REDIS_PORT } from './targets.ts';

/** The name of the no-database HTTP + SSE floor in tables and checks. */
export const FLOOR_NAME = 'floor: Fastify + SSE, no database';

/** The durable floor's name: the floor plus one autocommit insert per publish (peer `floor-commit`). */
export const FLOOR_COMMIT_NAME = 'floor + commit: one insert per publish';

/** Starts the floor peer (bench/peers/floor-server.ts) on `port`; with `databaseUrl`, the durable
 * floor (peer `floor-commit`), which writes each event to that database before fanning it out.
 * `extra`: more environment and node flags (a preload, as cpu-ab's --gc). */
export async function startFloor(
  port: number,
  logDir: string,
  databaseUrl?: string,
  extra: { env?: Record<string, string>; nodeFlags?: string[] } = {},
): Promise<Server> {
  const name = databaseUrl ? 'floor-commit' : 'floor';
  const log = join(logDir, `${name}.log`);
  const env: Record<string, string> = {
    PORT: String(port),
    ...(databaseUrl ? { FLOOR_DATABASE_URL: databaseUrl } : {}),
    ...extra.env,
  };
  const cp = spawnNode(benchFile('peers/floor-server.ts'), [], {
    env,
    logFile: log,
    nodeFlags: extra.nodeFlags,
  });
  await waitForHttp(`http://127.0.0.1:${port}/readyz`, cp, 30_000);
  return { name, port, cp, log };
}

export const NATS_STREAM = 'COMMITFEED_BENCH';

export interface PeerStatus {
  ok: boolean;
  version?: string;
  reason?: string;
}

/** Connects to NATS, checks JetStream, and (re)creates the bench stream on file storage. */
export async function prepareNats(): Promise<PeerStatus> {
  let nc: Awaited<ReturnType<typeof connect>> | undefined;
  try {
    nc = await connect({ servers: '127.0.0.1:4222', timeout: 2000, maxReconnectAttempts: 0 });
    const jsm = await nc.jetstreamManager();
    await jsm.streams.delete(NATS_STREAM).catch(() => false);
    await jsm.streams.add({
      name: NATS_STREAM,
      subjects: ['bench.>'],
      storage: StorageType.File,
      retention: RetentionPolicy.Limits,
      max_bytes: 2 * 1024 ** 3,
    });
    return { ok: true, version: `nats-server ${nc.info?.version ?? '?'} (JetStream, file storage)` };
  } catch (err) {
    return { ok: false, reason: `NATS JetStream at 127.0.0.1:4222 not usable: ${(err as Error).message}` };
  } finally {
    await nc?.close().catch(() => {});
  }
}

export async function dropNats(): Promise<void> {
  try {
    const nc = await connect({ servers: '127.0.0.1:4222', timeout: 2000, maxReconnectAttempts: 0 });
    const jsm = await nc.jetstreamManager();
    await jsm.streams.delete(NATS_STREAM).catch(() => false);
    await nc.close();
  } catch {
    // unreachable: nothing to drop
  }
}

/** Connects to Redis and removes the bench's keys from an earlier run. */
export async function prepareRedis(): Promise<PeerStatus> {
  const r = new Redis({
    host: '127.0.0.1',
    port: REDIS_PORT,
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    connectTimeout: 2000,
    retryStrategy: () => null,
  });
  r.on('error', () => {});
  try {
    await r.connect();
    const info = await r.info('server');
    const version = /redis_version:(\S+)/.exec(info)?.[1] ?? '?';
    await dropRedisKeys(r);
    return { ok: true, version: `redis ${version}` };
  } catch (err) {
    return { ok: false, reason: `Redis at 127.0.0.1:${REDIS_PORT} not usable: ${(err as Error).message}` };
  } finally {
    r.disconnect();
  }
}

async function dropRedisKeys(r: Redis): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await r.scan(cursor, 'MATCH', 'bench:*', 'COUNT', 1000);
    cursor = next;
    if (keys.length > 0) await r.del(...keys);
  } while (cursor !== '0');
}

export async function dropRedis(): Promise<void> {
  const r = new Redis({
    host: '127.0.0.1',
    port: REDIS_PORT,
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  r.on('error', () => {});
  try {
    await r.connect();
    await dropRedisKeys(r);
  } catch {
    // unreachable: nothing to drop
  } finally {
    r.disconnect();
  }
}
