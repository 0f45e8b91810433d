// The name, type and key rules exist in TypeScript (src/feed/validate.ts, used for events and jobs)
// and are restated in SQL (src/sql/), for applications that call commitfeed.publish and
// commitfeed.enqueue in their own transactions. Both must accept and refuse the same inputs: lengths
// in characters (code points, so an astral character counts once), 200 allowed and 201 not, no
// control characters in a type, no NUL anywhere.
import type pg from 'pg';
import t from 'tap';
import { migrate } from '../src/db/migrate.ts';
import { toEventInput } from '../src/feed/event.ts';
import { toJobInput } from '../src/queues/validate.ts';
import { pgClient, sqlClient, testDatabase } from './helpers.ts';

const EMOJI = '😀'; // one code point, two UTF-16 units
const E_ACUTE = 'e\u0301'; // two code points (e + combining acute), one grapheme

/** Keys: events and jobs share the rule. [what, key, accepted] */
const KEYS: [string, string, boolean][] = [
  ['one letter', 'k', true],
  ['empty', '', false],
  ['200 letters', 'a'.repeat(200), true],
  ['201 letters', 'a'.repeat(201), false],
  ['200 astral characters (400 UTF-16 units)', EMOJI.repeat(200), true],
  ['201 astral characters', EMOJI.repeat(201), false],
  ['199 letters and an astral character (201 UTF-16 units)', `${'a'.repeat(199)}${EMOJI}`, true],
  ['100 e + combining accent (200 code points)', E_ACUTE.repeat(100), true],
  ['100 e + combining accent and one letter (201 code points)', `${E_ACUTE.repeat(100)}a`, false],
  ['control characters', 'a\u0001\t\n\u007f', true],
  ['NUL', 'a\u0000b', false],
];

/** Event types. */
const TYPES: [string, string, boolean][] = [
  ['a word', 'created', true],
  ['empty', '', false],
  ['200 letters', 't'.repeat(200), true],
  ['201 letters', 't'.repeat(201), false],
  ['200 astral characters', EMOJI.repeat(200), true],
  ['201 astral characters', EMOJI.repeat(201), false],
  ['a line break', 'a\nb', false],
  ['a carriage return', 'a\rb', false],
  ['U+0001', 'a\u0001', false],
  ['DEL', 'a\u007f', false],
  ['NUL', 'a\u0000', false],
  ['a C1 character (not a C0 control)', 'a\u0085', true],
  ['spaces and punctuation', 'order created: v2 (é)', true],
];

/** Stream and queue names. */
const NAMES: [string, string, boolean][] = [
  ['letters, digits and . _ : -', 'a.B_1:-', true],
  ['200 letters', 'n'.repeat(200), true],
  ['201 letters', 'n'.repeat(201), false],
  ['empty', '', false],
  ['a space', 'a b', false],
  ['a slash (queue wake-up streams are internal)', 'queue/x', false],
  ['a non-ASCII letter', 'ä', false],
  ['an astral character', EMOJI, false],
  ['NUL', 'a\u0000', false],
];

/** Runs `text` in a transaction that is rolled back: accepted, or refused with a data error. */
async function sqlAccepts(app: pg.Client, text: string, params: unknown[]): Promise<boolean | string> {
  await app.query('BEGIN');
  try {
    await app.query(text, params);
    return true;
  } catch (err) {
    const code = (err as { code?: string }).code;
    // 22023: the functions' own refusal; 22021: PostgreSQL refuses NUL in text before they run.
    return code === '22023' || code === '22021'
      ? false
      : `unexpected error ${code}: ${(err as Error).message}`;
  } finally {
    await app.query('ROLLBACK');
  }
}

function tsAccepts(fn: () => unknown): boolean {
  try {
    fn();
    return true;
  } catch {
    return false;
  }
}

t.test('TypeScript and SQL accept and refuse the same names, types and keys', async (t) => {
  const url = await testDatabase(t);
  await migrate(sqlClient(t, url));
  const app = await pgClient(t, url);
  const PUBLISH = 'select commitfeed.publish($1, $2::jsonb, $3, $4)';
  const ENQUEUE = 'select commitfeed.enqueue($1, $2::jsonb, key => $3)';

  for (const [what, key, ok] of KEYS) {
    const event = tsAccepts(() => toEventInput('s', { data: 1, key }, 1 << 20));
    const job = tsAccepts(() => toJobInput('q', { payload: 1, key }, 1 << 20));
    t.equal(event, ok, `event key, ${what}: TypeScript ${ok ? 'accepts' : 'refuses'}`);
    t.equal(job, ok, `job key, ${what}: TypeScript ${ok ? 'accepts' : 'refuses'}`);
    t.equal(await sqlAccepts(app, PUBLISH, ['s', '1', null, key]), ok, `event key, ${what}: SQL agrees`);
    t.equal(await sqlAccepts(app, ENQUEUE, ['q', '1', key]), ok, `job key, ${what}: SQL agrees`);
  }
  for (const [what, type, ok] of TYPES) {
    t.equal(
      tsAccepts(() => toEventInput('s', { data: 1, type }, 1 << 20)),
      ok,
      `type, ${what}: TypeScript ${ok ? 'accepts' : 'refuses'}`,
    );
    t.equal(await sqlAccepts(app, PUBLISH, ['s', '1', type, null]), ok, `type, ${what}: SQL agrees`);
  }
  for (const [what, name, ok] of NAMES) {
    t.equal(
      tsAccepts(() => toEventInput(name, { data: 1 }, 1 << 20)),
      ok,
      `stream name, ${what}: TypeScript ${ok ? 'accepts' : 'refuses'}`,
    );
    t.equal(
      tsAccepts(() => toJobInput(name, { payload: 1 }, 1 << 20)),
      ok,
      `queue name, ${what}: TypeScript ${ok ? 'accepts' : 'refuses'}`,
    );
    t.equal(await sqlAccepts(app, PUBLISH, [name, '1', null, null]), ok, `stream name, ${what}: SQL agrees`);
    t.equal(await sqlAccepts(app, ENQUEUE, [name, '1', null]), ok, `queue name, ${what}: SQL agrees`);
  }

  // The SQL name rule is an expression PostgreSQL inlines into append's and enqueue_jobs' queries; a
  // call per row instead cost 4.7 us per name (e.g. after declaring it immutable over stable calls).
  const plan = await app.query(
    `explain verbose select commitfeed.invalid_name('stream', s, s) from unnest(array['a', 'b']) as s`,
  );
  t.notMatch(
    plan.rows.map((r) => r['QUERY PLAN']).join('\n'),
    /invalid_name/,
    'commitfeed.invalid_name is inlined (no function call per row)',
  );

  // A lone surrogate never reaches SQL as such (the driver's UTF-8 encoding turns it into U+FFFD, so two
  // different keys would collide there): TypeScript refuses it.
  t.notOk(
    tsAccepts(() => toEventInput('s', { data: 1, key: 'a\ud800' }, 1 << 20)),
    'event key, lone surrogate',
  );
  t.notOk(
    tsAccepts(() => toJobInput('q', { payload: 1, key: 'a\ud800' }, 1 << 20)),
    'job key, lone surrogate',
  );
  t.notOk(
    tsAccepts(() => toEventInput('s', { data: 1, type: 'a\udc00' }, 1 << 20)),
    'type, lone surrogate',
  );
});
