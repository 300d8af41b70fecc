// The main path: sign up, make a credential, publish through the gateway
// with mosquitto_pub, see the message in the Inspector, in Overview's
// counters and in Usage; revoke the credential and watch its connected
// client drop off the Clients page.
import type { Page } from '@playwright/test';
import { expect, expectNoSeriousA11yViolations, mosquittoPub, mosquittoSub, openPage, shot, signUpViaUI, test, unique, type Sub, inspectorSubscribeAll } from './fixtures';

// Usage reaches Postgres on the node's 10 s flush.
const usageDeadline = 30_000;

test.describe.configure({ timeout: 120_000 });

let sub: Sub | undefined;
test.afterEach(async () => {
  await sub?.stop();
  sub = undefined;
});

test('credential → publish → inspector, overview, usage → revoke drops the client', async ({ page }) => {
  await signUpViaUI(page);

  // A credential made on the Credentials page; its password is shown once.
  await openPage(page, 'Credentials');
  const name = `sensors-${unique(3)}`;
  const form = page.getByRole('form', { name: 'New credential' });
  await form.getByLabel('Name').fill(name);
  await form.getByLabel('Publish filters').fill('e2e/#');
  await form.getByLabel('Subscribe filters').fill('e2e/#');
  await form.getByRole('button', { name: 'Create credential' }).click();
  const notice = page.getByRole('status').filter({ hasText: `Credential ${name} created` });
  await expect(notice).toBeVisible();
  const username = (await notice.locator('.secret').first().innerText()).trim();
  const password = (await page.getByTestId('credential-password').innerText()).trim();
  expect(username).toMatch(/\S/);
  expect(password.split('.')).toHaveLength(3); // a JWT
  const row = page.getByRole('row').filter({ hasText: name });
  await expect(row).toContainText(username);
  await expect(row).toContainText('active');
  await shot(page, 'flow-credential-created');
  await notice.getByRole('button', { name: 'I have stored it' }).click();
  await expect(page.getByTestId('credential-password')).toHaveCount(0);

  // The Inspector: connected over WebSocket through the gateway, subscribed to '#'.
  await openPage(page, 'Inspector');
  await inspectorSubscribeAll(page);

  // 30 messages through the gateway (the free plan allows 20/s per client).
  const messages = 30;
  await mosquittoPub(['-V', 'mqttv5', '-i', `pub-${unique(3)}`, '-u', username, '-P', password, '-q', '1', '-t', 'e2e/temp', '-m', '21.5', '--repeat', String(messages), '--repeat-delay', '0.06']);

  const list = page.getByRole('list', { name: 'Messages, newest first' });
  await expect(list.getByRole('listitem')).toHaveCount(messages);
  await expect(list.getByRole('listitem').first()).toContainText('e2e/temp');
  await expect(list.getByRole('listitem').first()).toContainText('21.5');
  await expect(page.locator('.insp-counters')).toContainText(`Received ${messages}`);
  // A message opens to its payload.
  const first = list.getByRole('listitem').first().getByRole('button').first();
  await first.click();
  await expect(first).toHaveAttribute('aria-expanded', 'true');
  await expect(list.locator('.insp-payload').first()).toHaveText('21.5');
  await expectNoSeriousA11yViolations(page);
  await shot(page, 'flow-inspector');

  // Overview: this month's messages, once the node has flushed usage.
  await openPage(page, 'Overview');
  const monthBar = page.locator('.quota').filter({ hasText: 'Messages this month' });
  await reloadUntil(page, 'Overview', async () => {
    await expect(monthBar).toContainText(`${messages} of 1.0M`, { timeout: 1_000 });
    // The Inspector's subscription got each message: as many deliveries, timed.
    await expect(page.locator('.stat').filter({ hasText: 'Publish → delivery' })).toContainText(`${messages} deliveries`, { timeout: 1_000 });
  });
  await expect(page.locator('.stat').filter({ hasText: 'Messages in / s' })).toContainText('0.1'); // 30 over 5 minutes
  await shot(page, 'flow-overview');

  // Usage: the month's total and today's point in the chart.
  await openPage(page, 'Usage');
  await reloadUntil(page, 'Usage', async () => {
    await expect(page.getByText(`this month so far: ${messages} messages accepted (billed) of ${messages} in`)).toBeVisible({ timeout: 1_000 });
  });
  await expect(page.getByText(/\b1 of 30 days with traffic\b/)).toBeVisible();
  // The credential's own row in the by-credential table: its 30 messages in.
  await expect(page.getByRole('row').filter({ hasText: name }).getByRole('cell').nth(1)).toHaveText(String(messages));
  await expect(page.getByRole('img', { name: 'Messages in chart' })).toBeVisible();
  await shot(page, 'flow-usage');

  // A connected device shows on Clients...
  const clientId = `dev-${unique(3)}`;
  sub = mosquittoSub(['-V', 'mqttv5', '-i', clientId, '-u', username, '-P', password, '-t', 'e2e/#', '-q', '1']);
  await openPage(page, 'Clients');
  const clientRow = page.getByRole('row').filter({ hasText: clientId });
  await reloadUntil(page, 'Clients', async () => {
    await expect(clientRow).toContainText('connected', { timeout: 1_000 });
  });
  await expect.soft(clientRow.getByRole('cell').nth(4), 'Connected at of a connected client').toHaveText(/^\d{4}-\d\d-\d\d /);
  await expectNoSeriousA11yViolations(page);
  await shot(page, 'flow-clients-connected');

  // ...and drops off when its credential is revoked.
  await openPage(page, 'Credentials');
  await page.getByRole('row').filter({ hasText: name }).getByRole('button', { name: `Revoke ${name}` }).click();
  const dialog = page.getByRole('dialog', { name: `Revoke ${name}` });
  await expect(dialog).toBeVisible();
  await dialog.getByRole('button', { name: 'Revoke', exact: true }).click();
  await expect(page.getByRole('row').filter({ hasText: name })).toContainText('revoked');
  await expect.poll(() => sub!.proc.exitCode !== null || sub!.proc.signalCode !== null, { timeout: 15_000, message: `mosquitto_sub still connected after the revocation:\n${sub.output()}` }).toBe(true);

  await openPage(page, 'Clients');
  await reloadUntil(page, 'Clients', async () => {
    await expect(page.getByText('Asking the broker for sessions')).toHaveCount(0, { timeout: 2_000 });
    await expect(page.getByRole('row').filter({ hasText: clientId }).filter({ hasText: 'connected' })).toHaveCount(0, { timeout: 1_000 });
  });
  await shot(page, 'flow-clients-after-revoke');
});

/** Reloads the page until check passes, within the usage flush deadline. */
async function reloadUntil(page: Page, heading: string, check: () => Promise<void>) {
  await expect(async () => {
    await page.reload();
    await expect(page.getByRole('heading', { level: 1, name: heading })).toBeVisible();
    await check();
  }).toPass({ timeout: usageDeadline, intervals: [1_000, 2_000] });
}
