import t from 'tap';
import { START, compareCursors, epochTag, formatCursor, parseCursor } from '../src/feed/cursor.ts';

t.test('parse and format round-trip', async (t) => {
  t.same(parseCursor('751-10'), { txid: 751, id: 10 });
  t.equal(formatCursor({ txid: 751, id: 10 }), '751-10');
  t.same(parseCursor('0-0'), START);
});

t.test('a tag names the feed: parsed beside the position, written back unchanged', async (t) => {
  t.same(parseCursor('751-10.9f86d081'), { txid: 751, id: 10, tag: '9f86d081' });
  t.equal(formatCursor({ txid: 751, id: 10 }, '9f86d081'), '751-10.9f86d081');
  t.equal(formatCursor({ txid: 751, id: 10 }, ''), '751-10', 'no tag: the old form');
  t.same(
    parseCursor('751-10.9f86d081/orders'),
    { txid: 751, id: 10, tag: '9f86d081' },
    'an id naming its stream',
  );
  t.same(parseCursor('751-10/orders.eu'), { txid: 751, id: 10 }, 'untagged, a stream with a dot');
  const c = parseCursor('751-10.9f86d081')!;
  t.equal(formatCursor(c, c.tag), '751-10.9f86d081', 'round trip');
  t.equal(compareCursors(c, parseCursor('751-10')!), 0, 'the tag is no part of the position');
  t.equal(
    epochTag('9F86D081-884C-7D65-9A2F-EAA0C55AD015'),
    '9f86d081',
    'the first 8 hex digits of the epoch',
  );
  t.throws(() => epochTag('not a uuid'));
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
    '1-2.',
    '1-2.abc',
    '1-2.9F86D081',
    '1-2.9f86d0811',
    '1-2.zzzzzzzz',
    '1-2..9f86d081',
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
