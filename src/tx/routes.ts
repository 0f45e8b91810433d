/**
 * `POST /v1/tx`: several operations, one transaction. No SQL here: ops are checked and run by ops.ts.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Kysely } from 'kysely';
import { authorize, authorizeAdmin } from '../auth/policy.ts';
import { hubUrlFor } from '../mercure/publish.ts';
import type { Config } from '../config/config.ts';
import type { Database } from '../db/database.ts';
import type { Feed } from '../feed/feed.ts';
import { MAX_OPS, parseOps, runOps } from './ops.ts';
import { txBody, txResponse } from './schemas.ts';

type TxDeps = { db: Kysely<Database>; feed: Feed; config: Config };
type TxReq = { Body: { ops: unknown[] } };

export function txRoutes(app: FastifyInstance, deps: TxDeps): void {
  app.post<TxReq>(
    '/v1/tx',
    {
      schema: {
        summary: `Run 1-${MAX_OPS} operations in one transaction (all or nothing)`,
        body: txBody,
        response: txResponse,
      },
    },
    (request) => runTx(deps, request),
  );
}

async function runTx(deps: TxDeps, request: FastifyRequest<TxReq>) {
  const ops = parseOps(request.body.ops, deps.config.maxEventBytes, hubUrlFor(deps.config));
  // The stream or queue of every op, before anything is written. A Mercure update needs an admin
  // token: native stream grants never cover Mercure topics (docs/mercure.md).
  for (const op of ops) {
    if (op.kind === 'publish') authorize(request, 'publish', op.event.stream);
    else if (op.kind === 'mercure') authorizeAdmin(request);
    else authorize(request, 'enqueue', (op as { job: { queue: string } }).job.queue);
  }
  return { results: await runOps(deps, ops) };
}
