// Topics: rules, live topics and the retained-message browser.
import { createCredentialViaAPI, expect, expectNoSeriousA11yViolations, mosquittoPub, openPage, shot, signUpViaUI, test } from './fixtures';

test('topic rules, live topics and retained messages', async ({ page }) => {
  const a = await signUpViaUI(page);
  await openPage(page, 'Topics');

  const form = page.getByRole('form', { name: 'New topic rule' });
  await form.getByLabel('Topic filter').fill('sensors/+/temp');
  await form.getByLabel('Retention (seconds)').fill('3600');
  await form.getByLabel('Max rate (messages/s)').fill('50');
  await form.getByRole('button', { name: 'Add rule' }).click();
  const rule = page.getByRole('row').filter({ hasText: 'sensors/+/temp' });
  await expect(rule).toContainText('3600 s');
  await expect(rule).toContainText('allowed');
  await expect(rule).toContainText('50 msg/s');
  // A second rule for the same filter is refused, naming the one that has it.
  await form.getByLabel('Topic filter').fill('sensors/+/temp');
  await form.getByRole('button', { name: 'Add rule' }).click();
  await expect(form.getByText(/filter is already taken by top_/)).toBeVisible();
  await form.getByLabel('Topic filter').fill('');

  const c = await createCredentialViaAPI(page.request, a.tenantId, { pub: ['sensors/#'], sub: [] });
  await mosquittoPub(['-V', 'mqttv5', '-u', c.username, '-P', c.password, '-q', '1', '-r', '-t', 'sensors/a/temp', '-m', '{"celsius":21.5}']);
  await page.reload();
  await expect(page.getByRole('row').filter({ hasText: 'sensors/a/temp' })).toHaveCount(2); // live and retained
  const retained = page.getByRole('row').filter({ hasText: 'sensors/a/temp' }).filter({ has: page.getByRole('button', { name: 'View payload' }) });
  await retained.getByRole('button', { name: 'View payload' }).click();
  await expect(page.getByRole('row').filter({ hasText: 'sensors/a/temp' }).locator('pre')).toContainText('"celsius"');
  await expectNoSeriousA11yViolations(page);
  await shot(page, 'topics-in-use');

  // Delete the retained messages, then the rule.
  await page.getByRole('button', { name: 'Delete matching' }).click();
  await page.getByRole('dialog', { name: 'Delete matching' }).getByRole('button', { name: 'Delete retained' }).click();
  await expect(page.getByText('No retained message matches')).toBeVisible();
  await rule.getByRole('button', { name: 'Delete rule sensors/+/temp' }).click();
  await page.getByRole('dialog', { name: 'Delete rule sensors/+/temp' }).getByRole('button', { name: 'Delete', exact: true }).click();
  await expect(page.getByText('No topic rules')).toBeVisible();
});
