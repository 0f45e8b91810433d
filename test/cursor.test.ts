import t from 'tap';
import { START, compareCursors, formatCursor, parseCursor } from '../src/feed/cursor.ts';

t.test('parse and format round-trip', async (t) => {
  t.same(parseCursor('751-10'), { txid: 751, id: 10 });
  t.equal(formatCursor({ txid: 751, id: 10 }), '751-10');
  t.same(parseCursor('0-0'), START);
});

t.test('malformed cursors are rejected', async (t) => {
  for (const bad of [
    '',
    '-',
    '1',
    '1-',
    '-1',
    'a-1',
    '1-b',
    '1.5-2',
    '1-2-3',
    '99999999999999999-1',
    '9007199254740993-1',
  ]) {
    t.equal(parseCursor(bad), undefined, JSON.stringify(bad));
  }
});

t.test('ordering is numeric on (txid, id), not textual', async (t) => {
  const sorted = ['998-5', '999-1', '1000-2', '1000-10', '10000-1'].map((c) => parseCursor(c)!);
  const shuffled = [sorted[3], sorted[0], sorted[4], sorted[2], sorted[1]];
  t.same(shuffled.sort(compareCursors), sorted);
  t.ok(compareCursors(parseCursor('5-100')!, parseCursor('6-1')!) < 0, 'txid dominates id');
});
