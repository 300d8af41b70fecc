// A device's connect through the gateway becomes a trace on the Traces
// page, and the trace opens as a waterfall of the gateway's phases.
//
// The gateway samples 1% of connects (-trace-sample 0.01) but follows a
// device's own sampling decision: an MQTT 5 CONNECT with a W3C traceparent
// user property whose flags say sampled is always traced, as a child of
// the device's span. That is how this test gets a trace every time.
import { createCredentialViaAPI, expect, expectNoSeriousA11yViolations, mosquittoPub, openPage, shot, signUpViaUI, test, unique } from './fixtures';

test('a connect through the gateway shows as a trace and opens as a waterfall', async ({ page }) => {
  const a = await signUpViaUI(page);
  const c = await createCredentialViaAPI(page.request, a.tenantId, { pub: ['e2e/#'], sub: [] });
  const traceId = unique(16);
  const clientId = `traced-${unique(3)}`;
  await mosquittoPub(['-V', 'mqttv5', '-i', clientId, '-u', c.username, '-P', c.password, '-D', 'connect', 'user-property', 'traceparent', `00-${traceId}-${unique(8)}-01`, '-t', 'e2e/traced', '-m', 'hi']);

  await openPage(page, 'Traces');
  // Spans reach Postgres within the gateway's flush interval (1 s); the
  // page polls every 15 s, so reload instead of waiting for it.
  const link = page.getByRole('link', { name: traceId });
  await expect(async () => {
    await page.reload();
    await expect(link).toBeVisible({ timeout: 2_000 });
  }).toPass({ timeout: 30_000, intervals: [500, 1_000] });
  await expectNoSeriousA11yViolations(page);
  await shot(page, 'traces-list');

  // The filters run on the server: by client id and kind the trace stays,
  // as errors only or as another kind it goes.
  const filters = page.getByRole('form', { name: 'Trace filters' });
  await filters.getByLabel('Client id').fill(clientId);
  await filters.getByRole('button', { name: 'Filter' }).click();
  await filters.getByLabel('Kind').selectOption('gateway.connect');
  await expect(link).toBeVisible();
  await expect(page.getByRole('row')).toHaveCount(2); // the header and this trace
  await filters.getByLabel('Errors only').check();
  await expect(page.getByText('passes these filters')).toBeVisible();
  await filters.getByLabel('Errors only').uncheck();
  await filters.getByLabel('Kind').selectOption('mqtt.publish');
  await expect(page.getByText('passes these filters')).toBeVisible();
  await filters.getByLabel('Kind').selectOption('');
  await expect(link).toBeVisible();

  await link.click();
  await expect(page).toHaveURL(new RegExp(`/traces/${traceId}$`));
  await expect(page.getByRole('heading', { level: 1, name: 'Trace' })).toBeVisible();
  const waterfall = page.getByLabel('Waterfall');
  await expect(waterfall).toBeVisible();
  // gateway.connect and its four phases, in order.
  const rows = waterfall.locator('.wf-row .wf-name');
  await expect(rows).toHaveText(['gateway.connect', 'parse', 'auth', 'admission', 'route']);

  // A row opens to its span's attributes.
  const root = waterfall.getByRole('button', { name: /gateway\.connect/ });
  await root.click();
  await expect(root).toHaveAttribute('aria-expanded', 'true');
  await expect(waterfall).toContainText(clientId);
  await expect(waterfall).toContainText('connected');
  await expectNoSeriousA11yViolations(page);
  await shot(page, 'trace-waterfall');
  // The bars' duration labels stay inside the page.
  const width = page.viewportSize()!.width;
  expect.soft(await page.evaluate(() => document.documentElement.scrollWidth), 'page width with the waterfall open').toBeLessThanOrEqual(width + 1);
});
