/**
 * A delivery's body, made from its job's payload (commitfeed.follow_payload: the event's stream,
 * type, cursor and time written, and its data last, as written). The body is
 * `{"type","stream","id","time","data"}` with the data copied byte for byte (never re-serialised, so
 * numbers beyond double precision arrive as published); `id` is the event's cursor, the
 * `webhook-id` of every attempt.
 */

export interface Message {
  id: string;
  body: string;
}

/** The separator json_build_object writes before the last key's value. */
const DATA = '"data" : ';

export function messageOf(payload: string): Message {
  const p = JSON.parse(payload) as {
    stream: string;
    type: string | null;
    cursor: string;
    time: string;
    data: unknown;
  };
  // The data's own text: the last key of the object json_build_object wrote (keys and string values
  // before it are escaped, so this separator first occurs at the real key).
  const at = payload.indexOf(DATA);
  const end = payload.lastIndexOf('}');
  const data = at >= 0 && end > at ? payload.slice(at + DATA.length, end).trimEnd() : JSON.stringify(p.data);
  const head = JSON.stringify({ type: p.type, stream: p.stream, id: p.cursor, time: p.time });
  return { id: p.cursor, body: `${head.slice(0, -1)},"data":${data}}` };
}
