// The Billing page's settings: the budget webhook (set, refused at the
// field, replaced, rotated, removed; its signing secret shown once) and a
// card through Stripe Checkout (stripe-mock's session; the navigation to
// Stripe is intercepted, the stack never left), and the page on an API
// without payment.
import { createHmac } from 'node:crypto';
import { env, expect, expectNoSeriousA11yViolations, openPage, psql, shot, signUpViaUI, test, unique } from './fixtures';

const secretRe = /^whsec_[0-9a-f]{64}$/;

test('the budget webhook is set, refused at its field, replaced, rotated and removed', async ({ page, context }) => {
  const acct = await signUpViaUI(page);
  const account = psql(`SELECT account_id FROM tenants WHERE id = '${acct.tenantId}'`);
  await openPage(page, 'Billing');
  const section = page.getByTestId('budget-webhook');
  await expect(section).toContainText('No webhook');
  const field = section.getByLabel('Webhook URL');

  // A URL the browser takes but the API refuses (credentials): its 422 is shown at the field.
  await field.fill('https://user:pw@hooks.example.com/berth');
  await section.getByRole('button', { name: 'Set webhook' }).click();
  const fieldError = section.locator('#budget-webhook-url-error');
  await expect(fieldError).toContainText('no credentials');
  await expect(field).toHaveAttribute('aria-invalid', 'true');
  await expect(field).toHaveAttribute('aria-describedby', 'budget-webhook-url-error');
  await expect(section.getByRole('alert')).toHaveCount(0); // not repeated in a problem box
  expect((await page.request.get('/v1/billing/budget/webhook')).status()).toBe(404);
  await shot(page, 'billing-webhook-refused');

  // The answer of the page's PUT: the only one that carries the secret.
  const putAnswer = () =>
    page.waitForResponse((r) => r.url().endsWith('/v1/billing/budget/webhook') && r.request().method() === 'PUT').then((r) => r.json());

  // Set: the secret is shown once, equal to the PUT's answer, with its copy button and the verification code;
  // the API's GET has only its last 4 characters.
  const first = `https://hooks.example.com/berth-${unique(3)}`;
  await field.fill(first);
  const put1 = putAnswer();
  await section.getByRole('button', { name: 'Set webhook' }).click();
  const shown = section.getByTestId('budget-webhook-secret');
  await expect(shown).toHaveText(secretRe);
  await expect(fieldError).toHaveCount(0);
  await expect(field).toHaveAttribute('aria-invalid', 'false');
  const secret1 = (await shown.textContent())!.trim();
  expect(secret1).toBe((await put1).secret);
  const api1 = await (await page.request.get('/v1/billing/budget/webhook')).json();
  expect([api1.url, api1.secret, api1.secret_set, api1.secret_last4]).toEqual([first, undefined, true, secret1.slice(-4)]);
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: env.api });
  await section.getByRole('button', { name: 'Copy secret' }).click();
  await expect(section.getByRole('button', { name: 'Copied' })).toBeVisible();
  expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(secret1);
  await expect(section.locator('figure.snippet code')).toContainText("createHmac('sha256', secret).update(t + '.' + body)");
  await expect(section).toContainText('t + "." + body');
  await expectNoSeriousA11yViolations(page);
  await shot(page, 'billing-webhook-secret');

  // Shown once: gone when dismissed, and not shown again when the page loads.
  await section.getByRole('button', { name: 'I have stored it' }).click();
  await expect(shown).toHaveCount(0);
  await page.reload();
  await expect(section).toContainText(`Notices are POSTed to ${first}`);
  await expect(section).toContainText(`ending in ${secret1.slice(-4)}`);
  await expect(section).toContainText('rotate it to get a new one');
  await expect(page.getByText(secret1)).toHaveCount(0);

  // Replace the URL: the secret stays, and is not shown.
  const second = `https://hooks.example.com/berth-${unique(3)}`;
  await field.fill(second);
  const put2 = putAnswer();
  await section.getByRole('button', { name: 'Replace URL' }).click();
  await expect(section.getByRole('status')).toContainText('URL replaced; the signing secret is unchanged.');
  await expect(section).toContainText(`Notices are POSTed to ${second}`);
  await expect(shown).toHaveCount(0);
  expect((await put2).secret).toBeUndefined();
  const api2 = await (await page.request.get('/v1/billing/budget/webhook')).json();
  expect([api2.url, api2.secret, api2.secret_last4]).toEqual([second, undefined, secret1.slice(-4)]);

  // Rotate: asked first, then a new secret, shown once.
  await section.getByRole('button', { name: 'Rotate signing secret' }).click();
  const put3 = putAnswer();
  await page.getByRole('dialog', { name: 'Rotate signing secret' }).getByRole('button', { name: 'Rotate secret' }).click();
  await expect(shown).toHaveText(secretRe);
  const secret2 = (await shown.textContent())!.trim();
  expect(secret2).not.toBe(secret1);
  expect(secret2).toBe((await put3).secret);
  const api3 = await (await page.request.get('/v1/billing/budget/webhook')).json();
  expect([api3.url, api3.secret, api3.secret_last4]).toEqual([second, undefined, secret2.slice(-4)]);

  // The deliveries the billing worker recorded are listed.
  psql(`
    INSERT INTO budget_notifications (account_id, month, percent, total_cents, budget_cents, capped, created_at)
    VALUES ('${account}', date_trunc('month', now(), 'UTC'), 80, 8000, 10000, false, now()),
           ('${account}', date_trunc('month', now(), 'UTC'), 100, 10000, 10000, false, now());
    INSERT INTO budget_webhook_deliveries (event_id, account_id, month, percent, body, state, attempts, next_attempt_at, last_status, last_error, delivered_at, created_at)
    VALUES ('evt_e2e80', '${account}', date_trunc('month', now(), 'UTC'), 80, '{}', 'delivered', 2, now(), 200, NULL, now(), now() - interval '1 minute'),
           ('evt_e2e100', '${account}', date_trunc('month', now(), 'UTC'), 100, '{}', 'failed', 12, now(), NULL, 'connection refused', NULL, now());`);
  await page.reload();
  const deliveries = section.getByRole('table', { name: 'Latest deliveries' });
  await expect(deliveries.getByRole('row', { name: /evt_e2e80/ })).toContainText(/80 % of \d{4}-\d\d.*delivered.*2.*HTTP 200/);
  await expect(deliveries.getByRole('row', { name: /evt_e2e100/ })).toContainText(/100 % of \d{4}-\d\d.*failed.*12.*connection refused/);
  await shot(page, 'billing-webhook-deliveries');

  // Remove: asked first; the API has none afterwards.
  await section.getByRole('button', { name: 'Remove webhook' }).click();
  await page.getByRole('dialog', { name: 'Remove webhook' }).getByRole('button', { name: 'Remove webhook' }).click();
  await expect(section.getByRole('status')).toContainText('Webhook removed');
  await expect(section).toContainText('No webhook');
  await expect(field).toHaveValue('');
  expect((await page.request.get('/v1/billing/budget/webhook')).status()).toBe(404);
});

test('Add a card with Stripe Checkout: the API makes the session at stripe-mock and the browser goes to its url', async ({ page }) => {
  const acct = await signUpViaUI(page);
  const account = psql(`SELECT account_id FROM tenants WHERE id = '${acct.tenantId}'`);
  await openPage(page, 'Billing');
  const payment = page.getByTestId('payment');
  await expect(payment).toContainText('Payment method: none');
  await shot(page, 'billing-checkout');

  // Every request that leaves the stack (the Stripe page) is answered here instead.
  const api = new URL(env.api).origin;
  const left: string[] = [];
  await page.route(
    (u) => u.origin !== api,
    (route) => {
      left.push(route.request().url());
      return route.fulfill({ status: 200, contentType: 'text/html', body: '<!doctype html><title>Stripe Checkout</title><h1>Stripe Checkout (intercepted)</h1>' });
    },
  );
  // The API's answer, read on its way through (the page leaves before its body could be read after).
  let answer: { method: string; sent: unknown; status: number; body: { id: string; url: string } } | undefined;
  await page.route('**/v1/billing/checkout-session', async (route) => {
    const r = await route.fetch();
    answer = { method: route.request().method(), sent: route.request().postDataJSON(), status: r.status(), body: await r.json() };
    await route.fulfill({ response: r });
  });
  await payment.getByRole('button', { name: 'Add a card with Stripe Checkout' }).click();
  await expect.poll(() => answer).toBeDefined();
  const back = `${api}/tenants/${acct.tenantId}/billing?checkout=`;
  expect(answer!.method).toBe('POST');
  expect(answer!.sent).toEqual({ success_url: back + 'saved', cancel_url: back + 'cancelled' });
  expect(answer!.status).toBe(200);
  const session = answer!.body;
  expect(session.id).toMatch(/^cs_/);
  expect(new URL(session.url).protocol).toBe('https:');
  await page.waitForURL(session.url);
  expect(left).toEqual([session.url]);
  await expect(page.getByRole('heading', { name: 'Stripe Checkout (intercepted)' })).toBeVisible();
  const customer = psql(`SELECT stripe_customer_id FROM accounts WHERE id = '${account}'`);
  expect(customer).toMatch(/^cus_/);

  // Stripe sends the user back; the card shows as on file once Stripe's
  // signed checkout.session.completed reaches the API (the page polls).
  await page.goto(back + 'saved');
  await expect(payment.getByRole('status')).toContainText('Stripe is saving your card');
  const event = JSON.stringify({
    id: `evt_e2e_${unique(6)}`,
    object: 'event',
    api_version: '2025-08-27.basil',
    type: 'checkout.session.completed',
    created: Math.floor(Date.now() / 1000),
    data: { object: { id: session.id, object: 'checkout.session', mode: 'setup', status: 'complete', customer } },
  });
  const t = Math.floor(Date.now() / 1000);
  const sig = createHmac('sha256', env.stripeWebhookSecret).update(`${t}.${event}`).digest('hex');
  const hook = await page.request.post('/v1/billing/webhook', { data: event, headers: { 'Content-Type': 'application/json', 'Stripe-Signature': `t=${t},v1=${sig}` } });
  expect(hook.status(), await hook.text()).toBe(200);
  await expect(payment).toContainText('Payment method: on file', { timeout: 15_000 });
  await expect(payment.getByRole('status')).toContainText('Stripe saved your card: it is on file.');
  await shot(page, 'billing-checkout-saved');

  // Leaving Checkout brings the user back with nothing saved said so.
  await page.goto(back + 'cancelled');
  await expect(payment.getByRole('status')).toContainText('left without saving a card');
});

test.describe('without payment', () => {
  test.use({ baseURL: env.apiNoPayment });

  test('the Billing page says payment is not enabled and offers no Checkout', async ({ page }) => {
    await signUpViaUI(page);
    await openPage(page, 'Billing');
    const payment = page.getByTestId('payment');
    await expect(payment).toContainText('Payment is not enabled on this service');
    await expect(page.getByRole('button', { name: /Stripe Checkout/ })).toHaveCount(0);
    // The budget webhook needs no payment.
    await expect(page.getByTestId('budget-webhook')).toContainText('No webhook');
    await shot(page, 'billing-no-payment');
  });
});
