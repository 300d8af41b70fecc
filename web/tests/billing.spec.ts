// The Billing page shows the account's payment state, this month's estimate
// (the draft invoice), its issued invoices with links to each printable
// page and its PDF, and its budget.
import { expect, openPage, psql, shot, signUpViaUI, test, unique } from './fixtures';

test('the Billing page shows the estimate, the invoices and the budget', async ({ page }) => {
  const acct = await signUpViaUI(page);
  const account = psql(`SELECT account_id FROM tenants WHERE id = '${acct.tenantId}'`);
  const draft = `inv_e2e_d${unique(4)}`;
  const issued = `inv_e2e_f${unique(4)}`;
  // What the billing worker writes: the running month's draft, and last month's invoice issued.
  psql(`
    INSERT INTO invoices (id, account_id, month, status, currency, total_cents, created_at, updated_at)
    VALUES ('${draft}', '${account}', date_trunc('month', now(), 'UTC'), 'draft', 'usd', 1234, now(), now()),
           ('${issued}', '${account}', date_trunc('month', now(), 'UTC') - interval '1 month', 'draft', 'usd', 490000, now(), now());
    INSERT INTO invoice_lines (invoice_id, line, tenant_id, tenant_slug, plan, meter, description, unit, quantity, included, billable, amount_cents)
    VALUES ('${issued}', 1, '${acct.tenantId}', 'e2e', 'pro', 'base', 'pro plan', 'month', 1, 0, 1, 490000);
    UPDATE invoices SET status = 'final', finalized_at = now(),
      number = (SELECT coalesce(max(number), 0) + 1 FROM invoices) WHERE id = '${issued}';`);
  const put = await page.request.put('/v1/billing/budget', { data: { monthly_cents: 10000, action: 'cap' } });
  expect(put.status()).toBe(200);

  await openPage(page, 'Billing');
  await expect(page.getByTestId('payment')).toContainText('Payment method: none');
  await expect(page.getByTestId('estimate')).toContainText('$12.34');
  await expect(page.getByRole('cell', { name: '$4,900.00' })).toBeVisible();
  await expect(page.getByTestId('budget')).toContainText('$100.00');
  const link = page.getByRole('link', { name: /^Open / }).last();
  const href = await link.getAttribute('href');
  expect(href).toBe(`/v1/invoices/${issued}.html`);
  const html = await page.request.get(href!);
  expect(html.status()).toBe(200);
  expect(html.headers()['content-type']).toContain('text/html');
  expect(await html.text()).toContain('4,900.00');
  // The same invoice as a PDF, linked beside it.
  const pdfLink = page.getByRole('link', { name: /^PDF of / }).last();
  expect(await pdfLink.getAttribute('href')).toBe(`/v1/invoices/${issued}.pdf`);
  const pdf = await page.request.get(`/v1/invoices/${issued}.pdf`);
  expect(pdf.status()).toBe(200);
  expect(pdf.headers()['content-type']).toBe('application/pdf');
  expect((await pdf.body()).subarray(0, 7).toString('latin1')).toBe('%PDF-1.');
  await shot(page, 'billing-invoices');
});
