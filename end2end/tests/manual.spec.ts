// The manual at /docs/: linked from the console's header, its pages and
// search work under their own Content-Security-Policy (no script refused).
import { test, expect } from '@playwright/test';
import { hydrated, signIn, url } from './helpers';

test('the console links the manual, whose chapters, CLI reference and search work', async ({ page }) => {
  const refused: string[] = [];
  page.on('console', (message) => {
    if (message.type() === 'error') refused.push(message.text());
  });
  page.on('pageerror', (error) => refused.push(error.message));

  await signIn(page, '/');
  await hydrated(page);
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Docs' }).click();
  await expect(page).toHaveURL(url() + '/docs/');
  await expect(page.getByRole('heading', { name: 'GPUPlane', exact: true })).toBeVisible();

  // Every command's --help, one chapter.
  await page.locator('#mdbook-sidebar').getByRole('link', { name: 'Command line' }).click();
  await expect(page).toHaveURL(/\/docs\/reference\/cli\.html$/);
  await expect(page.getByRole('heading', { name: 'gpuctl job submit', exact: true })).toBeVisible();

  // The search runs mdBook's scripts: refused by a strict policy, it finds nothing.
  await page.keyboard.press('s');
  await page.locator('#mdbook-searchbar').pressSequentially('node policy');
  await expect(page.locator('#mdbook-searchresults a').first()).toBeVisible();
  await page.screenshot({ path: 'artifacts/manual.png' });
  expect(refused).toEqual([]);
});

test('the manual answers 404 for a page it does not have, and never leaves its folder', async ({ request }) => {
  expect((await request.get(url() + '/docs/no-such-page.html')).status()).toBe(404);
  expect((await request.get(url() + '/docs/%2e%2e/%2e%2e/Cargo.toml')).status()).toBe(404);
  const index = await request.get(url() + '/docs', { maxRedirects: 0 });
  expect(index.status()).toBe(308);
  expect(index.headers()['location']).toBe('/docs/');
});
