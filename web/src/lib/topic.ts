// Topic filter and name rules, the same as the API's topicProblem
// (services/internal/httpapi/validate.go), so the ACL editor refuses as you
// type what the server would refuse on submit.

const maxTopicBytes = 65535;

/** Why s is not a valid topic filter (or, with name, topic name); "" when it is. */
export function topicProblem(s: string, name = false): string {
  if (s === '') return 'must not be empty';
  const bytes = new TextEncoder().encode(s).length;
  if (bytes > maxTopicBytes) return 'must be at most 65535 bytes';
  if (s.includes('\u0000')) return 'must not contain U+0000';
  if (/[\uD800-\uDFFF]/.test(s.replace(/[\uD800-\uDBFF][\uDC00-\uDFFF]/g, ''))) return 'must be valid UTF-8';
  const levels = s.split('/');
  for (let i = 0; i < levels.length; i++) {
    const level = levels[i];
    const last = i === levels.length - 1;
    if (name) {
      if (level.includes('+') || level.includes('#')) return 'a topic name must not contain the wildcards + or #';
    } else {
      if (level.includes('#') && (level !== '#' || !last)) return '# must be a whole level and the last one';
      if (level.includes('+') && level !== '+') return '+ must be a whole level';
    }
  }
  return '';
}

/** Splits an editor's text (one filter a line, or comma separated) into filters. */
export function parseFilterList(text: string): string[] {
  return text
    .split(/[\n,]/)
    .map((f) => f.trim())
    .filter((f) => f !== '');
}

/** The problems of each filter in a list, by position; empty when all are valid. */
export function filterListProblems(filters: string[]): { filter: string; problem: string }[] {
  const out: { filter: string; problem: string }[] = [];
  const seen = new Set<string>();
  for (const f of filters) {
    const p = topicProblem(f);
    if (p) out.push({ filter: f, problem: p });
    else if (seen.has(f)) out.push({ filter: f, problem: 'is listed twice' });
    seen.add(f);
  }
  return out;
}
