/**
 * Request-log redaction: the request serializer shows the URL through redactUrl (token-source.ts),
 * the one function every logged URL goes through, so a token sent in the query string (`access_token`,
 * or the Mercure hub's 0.x `authorization`) never reaches the log, whatever the spelling of its name.
 */
import { redactUrl } from './token-source.ts';

/** Log serializer for requests: the URL through redactUrl. */
export function redactedRequest(req: { method: string; url: string; ip?: string; id?: string }) {
  return {
    method: req.method,
    url: redactUrl(req.url),
    host: (req as { host?: string }).host,
    remoteAddress: req.ip,
  };
}
