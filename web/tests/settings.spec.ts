// Settings: API keys (made, used, revoked), trace sampling and the tenant's delete button.
import { expect, expectNoSeriousA11yViolations, openPage, shot, signUpViaUI, test, unique } from './fixtures';

test('an API key is shown once, works, and stops working when revoked', async ({ page }) => {
  await signUpViaUI(page);
  await openPage(page, 'Settings');
  const name = `ci-${unique(3)}`;
  const form = page.getByRole('form', { name: 'New API key' });
  await form.getByLabel('Key name').fill(name);
  await form.getByRole('button', { name: 'Create API key' }).click();
  const secret = (await page.getByTestId('api-key-secret').innerText()).trim();
  expect(secret).toMatch(/\S{20,}/);
  const row = page.getByRole('row').filter({ hasText: name });
  await expect(row).toContainText('active');
  await expectNoSeriousA11yViolations(page);
  await shot(page, 'settings-api-key');

  const auth = { headers: { Authorization: `Bearer ${secret}` } };
  expect((await page.request.get('/v1/tenants', auth)).status()).toBe(200);

  await page.getByRole('button', { name: 'I have stored it' }).click();
  await expect(page.getByTestId('api-key-secret')).toHaveCount(0);
  await row.getByRole('button', { name: `Revoke key ${name}` }).click();
  await page.getByRole('dialog', { name: `Revoke key ${name}` }).getByRole('button', { name: 'Revoke key' }).click();
  await expect(row).toContainText('revoked');
  expect((await page.request.get('/v1/tenants', auth)).status()).toBe(401);
});

test('deleting the only tenant leads to creating a first one', async ({ page }) => {
  const a = await signUpViaUI(page);
  await openPage(page, 'Settings');
  const slug = (await (await page.request.get(`/v1/tenants/${a.tenantId}`)).json()).slug as string;
  await page.getByRole('button', { name: `Delete tenant ${slug}` }).click();
  await page.getByRole('dialog', { name: `Delete tenant ${slug}` }).getByRole('button', { name: 'Delete tenant' }).click();
  await expect(page.getByRole('heading', { level: 1, name: 'Create your first tenant' })).toBeVisible();
  expect((await page.request.get(`/v1/tenants/${a.tenantId}`)).status()).toBe(404);
});

test('the trace sampling rate is saved on the tenant', async ({ page }) => {
  const a = await signUpViaUI(page);
  await openPage(page, 'Settings');
  const form = page.getByRole('form', { name: 'Trace sampling' });
  await expect(form.getByLabel('Share of messages traced (0 to 1)')).toHaveValue('0.001');
  await form.getByLabel('Share of messages traced (0 to 1)').fill('0.25');
  await form.getByRole('button', { name: 'Save sampling' }).click();
  await expect(form.getByText('Saved; brokers apply it at once.')).toBeVisible();
  const t = await (await page.request.get(`/v1/tenants/${a.tenantId}`)).json();
  expect(t.trace_sample_rate).toBe(0.25);
});
