// Every page in the nav opens, shows its heading, passes axe and is
// photographed; on the mobile project nothing overflows sideways.
import type { Page } from '@playwright/test';
import { expect, expectNoSeriousA11yViolations, openPage, shot, signUpViaUI, test } from './fixtures';

const navPages = ['Overview', 'Connect', 'Credentials', 'Topics', 'Clients', 'Traces', 'Inspector', 'Usage', 'Billing', 'Settings'];

test.describe('pages', () => {
  test('the sign-up and log-in pages', async ({ page }) => {
    for (const [path, button] of [
      ['/signup', 'Sign up'],
      ['/login', 'Log in'],
    ]) {
      await page.goto(path);
      await expect(page.getByRole('button', { name: button })).toBeVisible();
      await expect(page.getByRole('heading', { level: 1 })).toBeVisible();
      await shot(page, path.slice(1));
      await expectNoSeriousA11yViolations(page);
      await noSidewaysOverflow(page);
    }
  });

  for (const name of navPages) {
    test(`${name} opens`, async ({ page }) => {
      await signUpViaUI(page);
      await openPage(page, name);
      await expect(page).toHaveURL(new RegExp(`/tenants/[^/]+/${name.toLowerCase()}$`));
      await expect(page.getByRole('link', { name, exact: true })).toHaveAttribute('aria-current', 'page');
      await settle(page);
      await expect(page.getByRole('heading', { level: 1, name, exact: true })).toBeVisible();
      await shot(page, name.toLowerCase());
      await expectNoSeriousA11yViolations(page);
      await noSidewaysOverflow(page);
    });
  }
});

/** Waits until the page shows no loading indicator. */
async function settle(page: Page) {
  await expect(page.locator('.loading')).toHaveCount(0, { timeout: 15_000 });
}

async function noSidewaysOverflow(page: Page) {
  const width = page.viewportSize()!.width;
  if (width > 400) return;
  const { scroll, culprits } = await page.evaluate((limit) => {
    // The outermost elements that stick out past the viewport and that no
    // scrolling or clipping ancestor contains.
    const clipped = (el: Element) => {
      for (let a = el.parentElement; a && a !== document.documentElement; a = a.parentElement) {
        if (getComputedStyle(a).overflowX !== 'visible') return true;
      }
      return false;
    };
    const out: string[] = [];
    for (const el of document.body.querySelectorAll('*')) {
      const r = el.getBoundingClientRect();
      if (r.right <= limit || clipped(el)) continue;
      const parent = el.parentElement!.getBoundingClientRect();
      if (parent.right > limit && el.parentElement !== document.body) continue;
      const name = el.tagName.toLowerCase() + (el.id ? `#${el.id}` : '') + [...el.classList].map((c) => `.${c}`).join('');
      out.push(`${name} (right edge ${Math.round(r.right)} px, ${Math.round(r.width)} px wide)`);
    }
    return { scroll: document.documentElement.scrollWidth, culprits: out.slice(0, 8) };
  }, width + 1);
  expect(scroll, `document.documentElement.scrollWidth at a ${width} px viewport on ${new URL(page.url()).pathname}; sticking out: ${culprits.join(', ')}`).toBeLessThanOrEqual(width + 1);
}
