// The Connect page: the gateway's addresses, and snippets filled with a
// fresh token that work as pasted.
import { spawnSync } from 'node:child_process';
import { createCredentialViaAPI, env, expect, expectNoSeriousA11yViolations, openPage, shot, signUpViaUI, test } from './fixtures';

test('the endpoints are the gateway, and the mosquitto_pub snippet delivers a first message', async ({ page }) => {
  const a = await signUpViaUI(page);
  await openPage(page, 'Connect');
  const endpoints = page.getByRole('table', { name: 'Endpoints' });
  await expect(endpoints.getByRole('row', { name: /MQTT over TCP/ })).toContainText(`mqtt://${env.mqtt}`);
  await expect(endpoints.getByRole('row', { name: /^WebSocket/ })).toContainText(`ws://${env.ws}/mqtt`);
  await expect(page.getByText('Waiting for your first message')).toBeVisible();

  const c = await createCredentialViaAPI(page.request, a.tenantId, { pub: ['devices/#'], sub: ['devices/#'] }, 'bench sensors');
  await page.reload();
  await expect(page.getByLabel('Credential')).toContainText(c.id);
  await page.getByRole('button', { name: 'Fill in a fresh token' }).click();
  const snippet = page.locator('figure.snippet').filter({ has: page.getByText('mosquitto_pub', { exact: true }) });
  const code = await snippet.locator('pre').innerText();
  expect(code).toContain(c.username);
  await expectNoSeriousA11yViolations(page);
  await shot(page, 'connect-snippets');

  // As a user would paste it into a shell.
  const run = spawnSync('sh', ['-c', code], { encoding: 'utf8', timeout: 15_000 });
  expect(run.status, `${code}\n${run.stdout}${run.stderr}`).toBe(0);
  await expect(page.getByText(/Your tenant has received messages \(\d+ so far\)/)).toBeVisible({ timeout: 15_000 });
});
