import { filterListProblems, parseFilterList } from '../lib/topic';

/**
 * A list of topic filters, one a line, checked as you type with the API's
 * own rules; the problems are announced beside the field.
 */
export function FilterListField({ label, value, onInput, hint }: { label: string; value: string; onInput: (v: string) => void; hint?: string }) {
  const problems = filterListProblems(parseFilterList(value));
  const id = label.toLowerCase().replace(/\W+/g, '-');
  return (
    <label>
      {label}
      <textarea
        rows={3}
        value={value}
        aria-invalid={problems.length > 0}
        aria-describedby={`${id}-help`}
        onInput={(e) => onInput((e.target as HTMLTextAreaElement).value)}
        spellcheck={false}
      />
      <span id={`${id}-help`} class={problems.length ? 'field-error' : 'muted small'} aria-live="polite">
        {problems.length ? problems.map((p) => `“${p.filter}” ${p.problem}`).join('; ') : hint}
      </span>
    </label>
  );
}
