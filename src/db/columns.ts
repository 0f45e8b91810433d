/**
 * Rows as columns: the parameters of the set-based SQL functions (commitfeed.append,
 * commitfeed.enqueue_jobs), which take one array per field and unnest them together.
 *
 * @example
 *   columns([{ a: 1, b: 'x' }, { a: 2, b: 'y' }], ['a', 'b']) // [[1, 2], ['x', 'y']]
 */
export function columns<T, K extends keyof T>(rows: readonly T[], fields: readonly K[]): T[K][][] {
  return fields.map((f) => {
    const col = new Array<T[K]>(rows.length);
    for (let i = 0; i < rows.length; i++) col[i] = rows[i][f];
    return col;
  });
}
