import type { ComponentChildren } from 'preact';

/** A column heading: its text, right-aligned for numbers, or read only by screen readers. */
export type Column = string | { label: string; num?: boolean; srOnly?: boolean };

/**
 * A data table in its scrolling frame: one header row of column headings,
 * and the rows the caller renders.
 */
export function Table({ columns, caption, children }: { columns: Column[]; caption?: string; children: ComponentChildren }) {
  return (
    <div class="table-wrap">
      <table>
        {caption ? <caption class="sr-only">{caption}</caption> : null}
        <thead>
          <tr>
            {columns.map((c) => {
              const col = typeof c === 'string' ? { label: c } : c;
              return (
                <th key={col.label} scope="col" class={col.num ? 'num' : undefined}>
                  {col.srOnly ? <span class="sr-only">{col.label}</span> : col.label}
                </th>
              );
            })}
          </tr>
        </thead>
        <tbody>{children}</tbody>
      </table>
    </div>
  );
}
