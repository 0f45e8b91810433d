/**
 * SSE admission and expiry: a per-token limit on open streams (429 before the stream opens), and the
 * end of a stream with `event: auth-expired` when its token stops being accepted (`exp` plus the
 * clock tolerance, the same instant a new request with it is refused).
 *
 * Lifecycle: a slot is taken at admission and freed when the connection closes; the expiry timer is
 * armed once the stream is open and cleared on close. Counts live on the app (`sseByToken`), so
 * servers in one process do not share them.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { ApiError } from '../errors.ts';
import { timerDelay } from '../timers.ts';

export const AUTH_EXPIRED_FRAME = `event: auth-expired\ndata: ${JSON.stringify({
  code: 'auth_expired',
  message: 'the token expired: reconnect with a fresh token (Last-Event-ID resumes where this ended)',
})}\n\n`;

/**
 * Admits an SSE stream before it opens (429 `too_many_connections` over MAX_SSE_PER_TOKEN). Call the
 * returned function once the stream is open, with how to end it: it ends the stream with
 * `event: auth-expired` when the token expires, and frees the slot when the connection closes.
 */
export function admitSse(
  request: FastifyRequest,
  reply: FastifyReply,
  maxPerToken: number,
): (end: (frame: string) => void) => void {
  const p = request.principal;
  const counts = request.server.sseByToken;
  const id = p?.tokenId ?? '';
  if (id !== '') {
    const n = counts.get(id) ?? 0;
    if (n >= maxPerToken) {
      throw new ApiError(
        429,
        'too_many_connections',
        `this token already holds ${n} SSE connections (MAX_SSE_PER_TOKEN=${maxPerToken}); close one, or read several streams on one connection with /v1/events`,
        { 'retry-after': '5' },
      );
    }
    counts.set(id, n + 1);
  }
  let timer: NodeJS.Timeout | undefined;
  let closed = false;
  // `on`, not `once`: close fires once anyway, and a once-wrapper per open stream is memory for nothing.
  reply.raw.on('close', () => {
    closed = true;
    clearTimeout(timer);
    if (id === '') return;
    const n = (counts.get(id) ?? 1) - 1;
    if (n <= 0) counts.delete(id);
    else counts.set(id, n);
  });
  return (end) => {
    const until = p?.acceptedUntil;
    if (until === undefined || closed) return;
    const arm = () => {
      const left = until - Date.now();
      if (left <= 0) return end(AUTH_EXPIRED_FRAME);
      timer = setTimeout(arm, timerDelay(left));
    };
    arm();
  };
}
