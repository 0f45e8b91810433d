/** The client's one error type, and how a failed response or a failed fetch becomes one. */

/** An API error: the HTTP status and the server's stable `code` (`status` 0: no answer at all). */
export class CommitfeedError extends Error {
  override readonly name = 'CommitfeedError';
  constructor(
    /** HTTP status; 0 when the request never got an answer (network error, timeout). */
    readonly status: number,
    /** The server's stable code (e.g. `invalid_name`, `unavailable`), or `network_error`. */
    readonly code: string,
    message: string,
    /** Milliseconds from the server's `Retry-After`, when it sent one. */
    readonly retryAfterMs?: number,
    /** The parsed error body, when there was one. */
    readonly body?: unknown,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }

  /** Worth retrying as is: no answer, a 5xx, 408, 425 or 429. Other 4xx need a different request. */
  get retryable(): boolean {
    return this.status === 0 || this.status >= 500 || [408, 425, 429].includes(this.status);
  }
}

function retryAfterMs(res: Response): number | undefined {
  const h = res.headers.get('retry-after');
  if (!h) return undefined;
  const s = Number(h);
  if (Number.isFinite(s)) return s * 1000;
  const at = Date.parse(h);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

export async function errorFrom(res: Response): Promise<CommitfeedError> {
  const text = await res.text().catch(() => '');
  let body: { code?: unknown; message?: unknown } | undefined;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON (a proxy's error page)
  }
  const code = typeof body?.code === 'string' ? body.code : `http_${res.status}`;
  const message =
    typeof body?.message === 'string' ? body.message : `HTTP ${res.status} ${res.statusText}`.trim();
  return new CommitfeedError(res.status, code, message, retryAfterMs(res), body ?? text);
}

export function networkError(err: unknown): CommitfeedError {
  if (err instanceof CommitfeedError) return err;
  const e = err as Error & { cause?: { code?: string; message?: string } };
  const detail = e.cause?.code ?? e.cause?.message ?? e.message;
  return new CommitfeedError(
    0,
    'network_error',
    `no answer from the server: ${detail}`,
    undefined,
    undefined,
    {
      cause: err,
    },
  );
}
