/**
 * Prints the configuration reference from src/config/config.ts's SETTINGS, so the two places users read it
 * never restate a default by hand: `npx tsx src/cli/config-docs.ts env > .env.example` and
 * `npx tsx src/cli/config-docs.ts table` (the table in docs/configuration.md, between its markers).
 * test/config.test.ts parses both files and compares them with SETTINGS.
 */
import { documentedVariables } from '../config/config.ts';

/** `.env.example`: every variable, set to its default, or commented out when it has none. */
export function renderEnvExample(): string {
  const lines = [
    '# commitfeed configuration. Copy to .env to change; real environment variables win over .env.',
  ];
  lines.push('# Durations take a unit: 250ms, 5s, 30m, 12h, 7d. Reference: docs/configuration.md.');
  for (const v of documentedVariables()) {
    if (v.section) lines.push('', `# --- ${v.section}`);
    for (const l of wrap(v.doc, 98)) lines.push(`# ${l}`);
    lines.push(v.default === undefined ? `# ${v.name}=` : `${v.name}=${v.default}`);
  }
  return `${lines.join('\n')}\n`;
}

/** The Markdown table of docs/configuration.md. */
export function renderTable(): string {
  const rows = ['| variable | default | meaning |', '|---|---|---|'];
  for (const v of documentedVariables()) {
    const dflt = v.default === undefined ? 'unset' : `\`${v.default}\``;
    rows.push(`| \`${v.name}\` | ${dflt} | ${v.doc.replaceAll('|', '\\|')} |`);
  }
  return `${rows.join('\n')}\n`;
}

function wrap(text: string, width: number): string[] {
  const out: string[] = [];
  let line = '';
  for (const word of text.split(' ')) {
    if (line !== '' && line.length + 1 + word.length > width) {
      out.push(line);
      line = word;
    } else line = line === '' ? word : `${line} ${word}`;
  }
  if (line !== '') out.push(line);
  return out;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const what = process.argv[2];
  if (what === 'env') process.stdout.write(renderEnvExample());
  else if (what === 'table') process.stdout.write(renderTable());
  else {
    console.error('usage: npx tsx src/cli/config-docs.ts env | table');
    process.exit(2);
  }
}
