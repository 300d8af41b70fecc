// The Inspector keeps its connection past its token's refresh point: at 80%
// of the token's life it mints a new one and re-authenticates (MQTT 5 AUTH
// through the gateway to the node), and messages keep arriving.
import { expect, inspectorSubscribeAll, mosquittoPub, openPage, shot, signUpViaUI, test, unique } from './fixtures';

test('the Inspector refreshes its token by re-authentication and keeps receiving', async ({ page }) => {
  await page.clock.install();
  const a = await signUpViaUI(page);
  await openPage(page, 'Inspector');
  await inspectorSubscribeAll(page);

  // A device credential to publish with.
  const res = await page.request.post(`/v1/tenants/${a.tenantId}/credentials`, { data: { name: `pub-${unique(3)}`, acl: { pub: ['insp/#'], sub: [] } } });
  expect(res.status(), await res.text()).toBe(201);
  const cred = (await res.json()) as { username: string; password: string };
  const list = page.getByRole('list', { name: 'Messages, newest first' });
  await mosquittoPub(['-V', 'mqttv5', '-u', cred.username, '-P', cred.password, '-t', 'insp/before', '-m', 'one']);
  await expect(list.getByRole('listitem').first()).toContainText('insp/before');

  // Eight minutes later by the page's clock, past 80% of the 10-minute token.
  await page.clock.fastForward('08:00');
  await expect(page.getByText(/Token refreshed by re-authentication \(AUTH 0x00/)).toBeVisible({ timeout: 15_000 });
  await expect(page.getByRole('status').filter({ hasText: /^Connected$/ })).toBeVisible();

  await mosquittoPub(['-V', 'mqttv5', '-u', cred.username, '-P', cred.password, '-t', 'insp/after', '-m', 'two']);
  await expect(list.getByRole('listitem').first()).toContainText('insp/after');
  await shot(page, 'inspector-reauthenticated');
});
