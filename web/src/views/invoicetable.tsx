import type { Schemas } from '../api/client';
import { money } from '../lib/money';
import { Table } from '../ui/table';

type Invoice = Schemas['Invoice'];

const kinds: Record<Invoice['kind'], string> = { invoice: 'Invoice', credit: 'Credit note', correction: 'Correction' };

/** "Invoice 7", "Credit note 9", "Correction 8"; a draft has no number yet. */
function documentName(kind: Invoice['kind'], n: number | null): string {
  return n == null ? kinds[kind] : `${kinds[kind]} ${n}`;
}

function printable(id: string, kind: 'html' | 'pdf'): string {
  return `/v1/invoices/${encodeURIComponent(id)}.${kind}`;
}

/**
 * The account's documents, newest month first and within a month in the
 * order they were issued (docs/billing.md, "Credits and corrections"): invoices, and the credit notes and corrections that
 * amend them, each named by kind and number, a credit or correction with a
 * link to the printable page of the document it amends, and a credit's
 * negative total shown as such.
 */
export function InvoiceTable({ items }: { items: Invoice[] }) {
  const byId = new Map(items.map((i) => [i.id, i]));
  // The API lists a month's documents by id; by number reads as they were
  // issued (the month's draft, unnumbered, first).
  const rows = [...items].sort((a, b) => (a.month === b.month ? (a.number ?? 0) - (b.number ?? 0) : a.month < b.month ? 1 : -1));
  return (
    <Table caption="Invoices, credit notes and corrections" columns={['Month', 'Document', 'Amends', 'Status', { label: 'Total', num: true }, 'Printable']}>
      {rows.map((i) => {
        const name = documentName(i.kind, i.number);
        // The amended document is of the same month, so nearly always on this page; else its number alone.
        const amended = i.amends ? byId.get(i.amends) : undefined;
        // A correction amends an invoice; a credit note an invoice or a correction.
        const amendsName = amended
          ? documentName(amended.kind, amended.number)
          : `${i.kind === 'correction' ? 'Invoice' : 'document'} ${i.amends_number ?? ''}`.trim();
        return (
          <tr key={i.id} data-invoice={i.id}>
            <td>{i.month}</td>
            <td>{name}</td>
            <td>
              {i.amends ? (
                <>
                  amends{' '}
                  <a href={printable(i.amends, 'html')} target="_blank" rel="noopener">
                    {amendsName}
                  </a>
                </>
              ) : (
                <span class="muted">—</span>
              )}
            </td>
            <td>{i.status === 'draft' ? 'estimate' : 'issued'}</td>
            <td class={i.total_cents < 0 ? 'num ok' : 'num'}>
              {money(i.total_cents, i.currency)}
              {i.kind === 'credit' ? <span class="muted small"> credit</span> : null}
            </td>
            <td>
              <a href={printable(i.id, 'html')} target="_blank" rel="noopener" aria-label={`Open ${name} (${i.month})`}>
                Open
              </a>{' '}
              ·{' '}
              <a href={printable(i.id, 'pdf')} target="_blank" rel="noopener" aria-label={`PDF of ${name} (${i.month})`}>
                PDF
              </a>
            </td>
          </tr>
        );
      })}
    </Table>
  );
}
