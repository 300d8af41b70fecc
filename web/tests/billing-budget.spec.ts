// The Billing page's budget editor (set, change, remove the monthly budget;
// the page's own checks and the API's 422 at the field; this month's spend
// against it as a bar; its latest notice) and the invoices list's credit
// notes and corrections, each named by kind with a link to what it amends.
import type { Page } from '@playwright/test';
import { expect, openPage, psql, shot, signUpViaUI, test, unique } from './fixtures';

/** The account's budget as the API answers it, or null when none is set. */
async function budgetOf(page: Page): Promise<{ monthly_cents: number; action: string } | null> {
  const r = await page.request.get('/v1/billing/budget');
  if (r.status() === 404) return null;
  expect(r.status()).toBe(200);
  return r.json();
}

test('the budget is set, changed and removed from the Billing page', async ({ page }) => {
  const acct = await signUpViaUI(page);
  const account = psql(`SELECT account_id FROM tenants WHERE id = '${acct.tenantId}'`);
  // This month's draft, as the billing worker writes it: $80.00 so far.
  psql(`INSERT INTO invoices (id, account_id, month, status, currency, total_cents, created_at, updated_at)
        VALUES ('inv_e2e_b${unique(4)}', '${account}', date_trunc('month', now(), 'UTC'), 'draft', 'usd', 8000, now(), now())`);

  await openPage(page, 'Billing');
  const panel = page.getByTestId('budget');
  await expect(panel).toContainText('No budget');
  const form = page.getByRole('form', { name: 'Budget' });
  const amount = form.getByLabel('Monthly budget (USD)');
  const submit = page.getByRole('button', { name: 'Set budget' });

  // The page's own check: not a positive amount of whole cents; nothing is sent.
  await amount.fill('0');
  await submit.click();
  await expect(form.getByText('Must be more than $0.00.')).toBeVisible();
  await amount.fill('12.345');
  await submit.click();
  await expect(form.getByText('At most two decimals: a budget is whole cents.')).toBeVisible();
  await expect(amount).toHaveAttribute('aria-invalid', 'true');
  expect(await budgetOf(page)).toBeNull();

  // Above the API's bound ($10,000,000.00): the API's 422, shown at the field.
  await amount.fill('10,000,000.01');
  const refused = page.waitForResponse((r) => r.url().endsWith('/v1/billing/budget') && r.request().method() === 'PUT');
  await submit.click();
  expect((await refused).status()).toBe(422);
  const fieldError = form.locator('#budget-amount-error');
  await expect(fieldError).toContainText('from 1 to 1000000000');
  await expect(amount).toHaveAttribute('aria-describedby', 'budget-amount-error');
  await expect(panel.getByRole('alert')).toHaveCount(0); // at the field, not in a problem box
  await shot(page, 'billing-budget-refused');
  expect(await budgetOf(page)).toBeNull();

  // Set: $100.00, capping at 100 %.
  await amount.fill('100');
  await form.getByRole('radio', { name: "Cap the tenants' quotas" }).check();
  await submit.click();
  await expect(page.getByRole('status').filter({ hasText: 'Budget set.' })).toBeVisible();
  expect(await budgetOf(page)).toMatchObject({ monthly_cents: 10000, action: 'cap' });
  await expect(panel).toContainText("Monthly budget $100.00; at 100 % Berth caps the tenants' quotas");
  await expect(fieldError).toHaveCount(0);
  const spend = page.getByTestId('budget-spend');
  await expect(spend).toContainText('$80.00 of $100.00 · 80 %');
  await expect(spend.getByRole('progressbar')).toHaveAttribute('aria-valuenow', '80');

  // The worker's 80 % notice (what billing/internal/metering records), shown after a reload.
  psql(`INSERT INTO budget_notifications (account_id, month, percent, total_cents, budget_cents, capped, created_at)
        VALUES ('${account}', date_trunc('month', now(), 'UTC'), 80, 8000, 10000, false, now())`);
  await page.reload();
  await expect(page.getByTestId('budget-notice')).toContainText(/Latest notice: 80 % of the budget reached in \d{4}-\d{2} \(\$80\.00 of \$100\.00\)/);
  await expect(amount).toHaveValue('100.00');
  await expect(form.getByRole('radio', { name: "Cap the tenants' quotas" })).toBeChecked();
  await shot(page, 'billing-budget-set');

  // Change: $250.50, notify only.
  await amount.fill('250.50');
  await form.getByRole('radio', { name: 'Notify only' }).check();
  await page.getByRole('button', { name: 'Save budget' }).click();
  await expect(page.getByRole('status').filter({ hasText: 'Budget changed.' })).toBeVisible();
  expect(await budgetOf(page)).toMatchObject({ monthly_cents: 25050, action: 'notify' });
  await expect(panel).toContainText('Monthly budget $250.50; at 100 % Berth notifies.');
  await expect(spend).toContainText('$80.00 of $250.50 · 31 %');

  // Remove, asked first.
  await page.getByRole('button', { name: 'Remove budget' }).click();
  await page.getByRole('dialog', { name: 'Remove budget' }).getByRole('button', { name: 'Remove budget' }).click();
  await expect(page.getByRole('status').filter({ hasText: 'Budget removed' })).toBeVisible();
  expect(await budgetOf(page)).toBeNull();
  await expect(panel).toContainText('No budget');
  await expect(amount).toHaveValue('');
  await expect(page.getByRole('button', { name: 'Remove budget' })).toHaveCount(0);
});

test('credit notes and corrections are listed with their kind and what they amend', async ({ page }) => {
  const acct = await signUpViaUI(page);
  const account = psql(`SELECT account_id FROM tenants WHERE id = '${acct.tenantId}'`);
  const u = unique(4);
  const [inv, corr, cred] = [`inv_e2e_i${u}`, `inv_e2e_c${u}`, `inv_e2e_k${u}`];
  // What the worker and `billing credit` write: last month's invoice, issued;
  // then a correction of it (late usage) and a credit note on it, each issued at
  // once with the next numbers of the one sequence (the lock keeps parallel
  // specs from taking the same ones).
  psql(`
    BEGIN;
    LOCK TABLE invoices IN SHARE ROW EXCLUSIVE MODE;
    INSERT INTO invoices (id, account_id, month, kind, amends, status, currency, total_cents, created_at, updated_at)
    VALUES ('${inv}', '${account}', date_trunc('month', now(), 'UTC') - interval '1 month', 'invoice', NULL, 'draft', 'usd', 5900, now(), now()),
           ('${corr}', '${account}', date_trunc('month', now(), 'UTC') - interval '1 month', 'correction', '${inv}', 'draft', 'usd', 625, now(), now()),
           ('${cred}', '${account}', date_trunc('month', now(), 'UTC') - interval '1 month', 'credit', '${inv}', 'draft', 'usd', -1500, now(), now());
    INSERT INTO invoice_lines (invoice_id, line, tenant_id, tenant_slug, plan, meter, description, unit, quantity, included, billable,
                               rate_cents, rate_per, amount_cents, amends_line)
    VALUES ('${inv}', 1, '${acct.tenantId}', 'e2e', 'pro', 'base', 'pro plan', 'month', 1, 0, 1, NULL, NULL, 5900, NULL),
           ('${corr}', 1, '${acct.tenantId}', 'e2e', 'pro', 'messages', 'Messages published: late usage (line 1 of the invoice)', 'message',
            3000000, 0, 3000000, 20, 1000000, 625, 1),
           ('${cred}', 1, '', '', '', 'credit', 'outage on the 12th', 'credit', 1, 0, 1, NULL, NULL, -1500, NULL);
    UPDATE invoices SET status = 'final', finalized_at = now(),
      number = (SELECT coalesce(max(number), 0) FROM invoices) + CASE id WHEN '${inv}' THEN 1 WHEN '${corr}' THEN 2 ELSE 3 END
      WHERE id IN ('${inv}', '${corr}', '${cred}');
    COMMIT;`);
  const number = (id: string) => psql(`SELECT number FROM invoices WHERE id = '${id}'`);
  const [nInv, nCorr, nCred] = [number(inv), number(corr), number(cred)];

  await openPage(page, 'Billing');
  const row = (id: string) => page.locator(`tr[data-invoice="${id}"]`);
  // The month's documents in the order they were issued.
  await expect(page.locator('tr[data-invoice] td:nth-child(2)')).toHaveText([`Invoice ${nInv}`, `Correction ${nCorr}`, `Credit note ${nCred}`]);
  await expect(row(inv)).toContainText(`Invoice ${nInv}`);
  await expect(row(inv).getByRole('cell').nth(2)).toHaveText('—');
  await expect(row(inv)).toContainText('$59.00');

  await expect(row(corr).getByRole('cell').nth(1)).toHaveText(`Correction ${nCorr}`);
  await expect(row(corr).getByRole('cell').nth(2)).toHaveText(`amends Invoice ${nInv}`);
  await expect(row(corr).getByRole('cell').nth(4)).toHaveText('$6.25');

  await expect(row(cred).getByRole('cell').nth(1)).toHaveText(`Credit note ${nCred}`);
  await expect(row(cred).getByRole('cell').nth(2)).toHaveText(`amends Invoice ${nInv}`);
  await expect(row(cred).getByRole('cell').nth(4)).toHaveText('−$15.00 credit');

  // Each amends link goes to the amended invoice's printable page.
  for (const id of [corr, cred]) {
    const link = row(id).getByRole('link', { name: `Invoice ${nInv}`, exact: true });
    expect(await link.getAttribute('href')).toBe(`/v1/invoices/${inv}.html`);
  }
  const amended = await page.request.get(`/v1/invoices/${inv}.html`);
  expect(amended.status()).toBe(200);
  expect(await amended.text()).toContain('59.00');
  // And each document's own printable page names it and what it amends.
  const credit = await page.request.get(await row(cred).getByRole('link', { name: /^Open Credit note / }).getAttribute('href') ?? '');
  expect(credit.status()).toBe(200);
  const creditPage = await credit.text();
  expect(creditPage).toContain(`Credit note ${nCred}`);
  expect(creditPage).toContain(`Invoice ${nInv}`);
  await shot(page, 'billing-credits-corrections');
});
