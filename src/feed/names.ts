/**
 * The one rule for stream and queue names, as a pattern: route schemas (ajv), event validation
 * (validate.ts), cursors that name their stream (cursor.ts) and the SQL functions (src/sql/
 * invalid-name.sql) all accept exactly these names.
 */

/** Stream and queue names: 1–200 characters of [A-Za-z0-9._:-]. */
export const NAME_PATTERN = '^[A-Za-z0-9._:-]{1,200}$';
