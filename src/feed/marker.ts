/**
 * The self-check's marker (src/ops/self-check.ts): a tiny row every process writes now and then to
 * the internal stream `commitfeed/selfcheck` and follows through its own delivery path. The `/` keeps
 * it out of everything a user reads: no stream name may contain one (names.ts), so no named read,
 * `from=earliest` read or stream subscription can ask for it; globs, the stream list and the live
 * page's stream views skip names with a `/`, and Mercure reads only `mercure/updates`.
 *
 * Its NOTIFY carries `selfcheck:<instance>:<seq>`, unlike every other feed write's empty payload, so a
 * listener knows a marker and whose it is: the writer's hears its own (the wake stage), the others
 * take it as no wake (their next read finds the row anyway; waking every process for every process's
 * marker would make N processes cost N² reads).
 */

/** The internal stream markers are written to. */
export const MARKER_STREAM = 'commitfeed/selfcheck';

/** The start of every marker's NOTIFY payload. */
export const MARKER_PREFIX = 'selfcheck:';

/** The NOTIFY payloads of one process's markers all start with this (`instance`: random, per process). */
export const markerPrefixOf = (instance: string): string => `${MARKER_PREFIX}${instance}:`;
