/** Request-log redaction: tokens sent in the URL (`access_token`) never reach the logs. */
import { TOKEN_QUERY } from './token-source.ts';

/** Log serializer for requests: the URL without the `access_token` value. */
export function redactedRequest(req: { method: string; url: string; ip?: string; id?: string }) {
  return {
    method: req.method,
    url: req.url.includes(TOKEN_QUERY)
      ? req.url.replace(/([?&]access_token=)[^&#]*/gi, '$1[redacted]')
      : req.url,
    host: (req as { host?: string }).host,
    remoteAddress: req.ip,
  };
}
