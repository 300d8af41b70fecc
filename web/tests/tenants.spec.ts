// The header's tenant switcher and New tenant dialog.
import { expect, expectNoSeriousA11yViolations, shot, signUpViaUI, tenantOf, test, unique } from './fixtures';

test('New tenant creates a tenant and moves the console to it', async ({ page }) => {
  await signUpViaUI(page);
  const slug = `e2e-${unique(4)}`;
  await page.getByRole('button', { name: 'New tenant' }).click();
  const dialog = page.getByRole('dialog', { name: 'New tenant' });
  await expect(dialog).toBeVisible();
  // It offers the plans the account is entitled to, and only those.
  const acc = await (await page.request.get('/v1/account')).json();
  for (const p of ['free', 'pro', 'business']) {
    const option = dialog.getByRole('combobox', { name: 'Plan' }).getByRole('option', { name: p });
    if (acc.plans.includes(p)) await expect(option).toBeEnabled();
    else await expect(option).toBeDisabled();
  }
  await expect(dialog.getByText(`up to ${acc.tenant_limit} tenants`)).toBeVisible();
  await dialog.getByLabel('Slug').fill(slug);
  await dialog.getByLabel('Plan').selectOption('free');
  await expectNoSeriousA11yViolations(page);
  await shot(page, 'new-tenant-dialog');
  const created = page.waitForResponse((r) => r.url().endsWith('/v1/tenants') && r.request().method() === 'POST');
  await dialog.getByRole('button', { name: 'Create tenant' }).click();
  const second = (await (await created).json()).id as string;
  await expect(dialog).toBeHidden();
  const switcher = page.getByRole('combobox', { name: 'Tenant', exact: true });
  await expect(switcher.locator('option')).toHaveCount(2);
  await expect(switcher.locator('option', { hasText: slug })).toHaveCount(1);
  await expect.poll(() => tenantOf(page), { message: 'the tenant in the URL after creating one' }).toBe(second);
  await expect(page).toHaveURL(/\/overview$/);
  await expect(switcher).toHaveValue(second);
});

test('the switcher moves between tenants on the same page; a taken slug is refused in the dialog', async ({ page }) => {
  const a = await signUpViaUI(page);
  const slug = `e2e-${unique(4)}`;
  const r = await page.request.post('/v1/tenants', { data: { slug } });
  expect(r.status(), await r.text()).toBe(201);
  const second = (await r.json()).id as string;

  await page.goto(`/tenants/${a.tenantId}/credentials`);
  const switcher = page.getByRole('combobox', { name: 'Tenant', exact: true });
  await expect(switcher.locator('option')).toHaveCount(2);
  await switcher.selectOption(second);
  await page.waitForURL(`**/tenants/${second}/credentials`);
  await expect(page.getByRole('heading', { level: 1, name: 'Credentials' })).toBeVisible();
  await switcher.selectOption(a.tenantId);
  await page.waitForURL(`**/tenants/${a.tenantId}/credentials`);

  await page.getByRole('button', { name: 'New tenant' }).click();
  const dialog = page.getByRole('dialog', { name: 'New tenant' });
  await dialog.getByLabel('Slug').fill(slug);
  await dialog.getByRole('button', { name: 'Create tenant' }).click();
  await expect(dialog.getByRole('alert')).toContainText('Already exists');
  await expect(dialog.getByRole('alert')).toContainText('slug');
  await shot(page, 'new-tenant-conflict');
  await dialog.getByRole('button', { name: 'Cancel' }).click();
  await expect(dialog).toBeHidden();
});
