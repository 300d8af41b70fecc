// Sign up, log out, log in; the API's refusals as the forms show them.
import { expect, expectNoSeriousA11yViolations, shot, signUpViaUI, test, unique } from './fixtures';

test('sign up, log out and log in again', async ({ page }) => {
  const a = await signUpViaUI(page);
  expect(a.tenantId).toMatch(/\S/);

  await page.getByRole('button', { name: 'Log out' }).click();
  await page.waitForURL('**/login');
  await expect(page.getByRole('navigation', { name: 'Pages' })).toHaveCount(0);
  // The session is gone on the server too: the API refuses the old cookies.
  expect((await page.request.get('/v1/tenants')).status()).toBe(401);

  await page.getByLabel('Email').fill(a.email);
  await page.getByLabel('Password').fill(a.password);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.waitForURL(`**/tenants/${a.tenantId}/overview`);
  await expect(page.getByRole('navigation', { name: 'Pages' })).toBeVisible();
  await expect(page.getByRole('heading', { level: 1, name: 'Overview' })).toBeVisible();
});

test('a wrong password shows the API problem', async ({ page }) => {
  const a = await signUpViaUI(page);
  await page.getByRole('button', { name: 'Log out' }).click();
  await page.waitForURL('**/login');

  await page.getByLabel('Email').fill(a.email);
  await page.getByLabel('Password').fill(a.password + 'x');
  await page.getByRole('button', { name: 'Log in' }).click();
  const alert = page.getByRole('alert');
  await expect(alert).toContainText('Wrong email or password');
  await expect(alert).toContainText('401');
  await expect(page).toHaveURL(/\/login$/);
  await expectNoSeriousA11yViolations(page);
  await shot(page, 'login-refused');
});

test('signup with a short password shows the field error', async ({ page }) => {
  await page.goto('/signup');
  await page.getByLabel('Email').fill(`e2e-${unique()}@example.com`);
  await page.getByLabel('Password').fill('short');
  await page.getByRole('button', { name: 'Sign up' }).click();
  const alert = page.getByRole('alert');
  await expect(alert).toContainText('Invalid input');
  await expect(alert).toContainText('password');
  await expect(alert).toContainText('at least 10 characters');
  await expect(page).toHaveURL(/\/signup$/);
  await expectNoSeriousA11yViolations(page);
  await shot(page, 'signup-refused');
});

test('pages need a session', async ({ page }) => {
  await page.goto('/tenants/t_nobody/overview');
  await page.waitForURL('**/login');
  await expect(page.getByRole('button', { name: 'Log in' })).toBeVisible();
});
